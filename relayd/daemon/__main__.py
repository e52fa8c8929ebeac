"""`python -m relayd.daemon`: the same as the `relayd` console script."""

from .cli import main

main()
