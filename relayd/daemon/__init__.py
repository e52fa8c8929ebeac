"""relayd, the daemon: the only part of relay that imports anyio and structlog.

`cli` is lean (options and the console entry point); `main.run()` loads the rest when a daemon really starts.
"""
