"""IGNITE interop: RFC 2045 message files with a YAML body, and serving an IGNITE queue.

IGNITE agents talk by dropping `.mime` files into `<queue>/<agent>/`; a monitor notices
them, marks them, tells the agent, retries what the agent never finishes and moves what
still fails to `<queue>/dead_letter/` with an escalation to `leader`. relay can read and
write those files and take the monitor's place. Data flows like this:

    file on disk ── mime.parse ──> MimeMessage ── convert.to_send ──> relay `send` (inbox
         ^                              │                               + arrival mechanism)
         │                              └── mime.write_atomic (status headers)
    relay Message ── convert.from_message ──> MimeMessage ── build/export ──> file on disk

* `mime`    the file format alone: parse (the standard library's email parser, so folded
            headers and CRLF work), build in IGNITE's exact header order, edit headers and
            replace files atomically. No relay concepts in it.
* `convert` relay Message <-> MimeMessage (priority critical <-> urgent, Thread-ID <-> thread,
            Repository/Issue <-> tags), lossless for relay's own fields.
* `queue`   the queue monitor: one pass (`QueueMonitor.run_once`) moves new files to
            `processed/`, delivers them through relay and marks them; timed-out files are
            retried with the shared backoff policy and finally dead-lettered. Every step is
            recorded in the file's own headers before the next begins, so a crash anywhere
            resumes without losing a file or delivering it twice. Waiting for changes uses
            `relayd.client.watch` (inotify), never a poll loop of its own.
* `mirror`  the other direction: relay mail to an agent with a queue directory is also
            written there as a file, so agents that only read files get it.
* `files`   the filesystem rules of a queue: moves that never replace, fsynced directories.

Shared core: imports neither anyio nor structlog, so `relayctl mime` starts fast; relayd runs
the same `QueueMonitor` in a worker thread.
"""
