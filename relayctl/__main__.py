from .fast import main

main()
