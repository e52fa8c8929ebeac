"""relay's web view: a live page for the person running the team (`relayctl web`).

A separate process (relayd keeps no TCP port), started by `relayctl web`; it needs the
optional extra `relay-bus[web]` (Starlette on uvicorn). How data flows:

    store changes ──> relayd.client.watch.Watch (relayd's event stream; inotify when relayd is down)
                  ──> live.Live (one thread): rebuilds the state with snapshot.build
                      (status, unread counts, recent messages) and hands it to the loop
                  ──> app: GET /api/events streams each new state as Server-Sent Events
    page ──> POST /api/send ──> relayd.client.full.Client.call("send") (the same operation as
                                 `relayctl send`, so the recipient is notified)
    page ──> GET /api/search ──> relayd.inbox.search.search (the same function as `relayctl search`)

guard.Guard sits in front of everything: 127.0.0.1 only, a random token in a header for
every request with data (the page gets it from the URL's fragment and keeps it in
sessionStorage; never a cookie, which other ports of 127.0.0.1 would receive), POSTs with
JSON bodies, no CORS, and a Content-Security-Policy without inline script. gate.Gate,
applied by serve.GatedH11, keeps strangers' connections few and short and drops event
streams nobody reads. The page (static/) is plain JavaScript that
renders every message field with textContent: a message is untrusted input.
docs/web.md describes the view and its security model.
"""
