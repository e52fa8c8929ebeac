"""What the commands of relayctl's fast path (send, read, heartbeat, status, set-status,
reserve, release, reservations) do once their arguments are parsed: build the request,
call relayd (or the store), print the answer.

The click commands (cmd_messages, cmd_agents) and the fast path (relayctl.fast) both run
these functions with the same parameters, so the two can only differ in how argv is
parsed, and tests hold that to click's parser. Nothing here imports click, msgspec or
the store: with relayd up, a command needs only a socket and these lines.
"""

from __future__ import annotations

import os
import time

from relayd import timefmt
from relayd.errors import Conflict, NotOwner, UsageError
from relayd.timefmt import ago, iso_seconds, now, parse_duration, parse_iso, short_span, shown

from .context import Settings, clip, echo, held_line, read_body, visible


def render_message(m: dict, delivery: str | None = None) -> str:
    """One message as `read` prints it; `delivery` is its ack state ("owed", "acked", ...).
    Every field is shown `visible`: a message's text never acts on the terminal, and a
    line break in a one-line field cannot fake a line of its own."""
    when = visible(timefmt.shown(m["ts"]))
    flag = "" if m.get("priority", "normal") == "normal" else f"[{m['priority']}] "
    if m.get("ack"):
        state = {"owed": "owed: relayctl ack " + visible(m["id"]), "acked": "acknowledged", "dead_letter": "dead letter"}.get(delivery or "", "ack requested")
        flag = f"[attempt {m.get('attempt') or 1}, {state}] " + flag
    thread = f"  (thread {visible(m['thread'])})" if m.get("thread") else ""
    tags = f"  #{' #'.join(visible(tag) for tag in m['tags'])}" if m.get("tags") else ""
    head = f"{visible(m['id'])}  {when}  {visible(m['from'])} → {visible(m['to'])}  {flag}{visible(m['subject'])}{thread}{tags}"
    body = m["body"].rstrip("\n")
    if not body or body == m["subject"]:
        return head
    # Split on newlines only: a carriage return or form feed is shown, not obeyed.
    return head + "\n" + "\n".join("    " + visible(line, lines=True) for line in body.split("\n"))


def send(s: Settings, args: tuple[str, ...], wait_for=None, timeout="5m", **options) -> None:
    """Send and report; with `wait_for` (read or ack), then wait for every recipient to get
    there. `options`: send's other options, as relayctl.fast.COMMANDS declares them (the
    click command and the fast path pass them on by those names)."""
    if options.pop("stdin", False):
        _refuse_with_stdin(options, wait_for)
        # deferred imports: relayctl's fast path loads this module (stdlib only, no msgspec or
        # click): what only a rarer option uses (--stdin, --wait, files, --ack, follow, MIME,
        # panes) loads when it is used
        from .send_stream import send_lines

        defaults = {"subject": options["subject"], "thread": options["thread"], "priority": options["priority"], "tags": list(options["tags"]),
                    "type": options["type_"], "ack": options["ack"], "ack_wait": options["ack_wait"], "max_deliver": options["max_deliver"], "broadcast": options["broadcast"]}
        if send_lines(s, args, {key: value for key, value in defaults.items() if value not in (None, False, [])}):
            raise SystemExit(1)  # each failed line said why on stdout, and the count went to stderr
        return
    wait = None
    if wait_for is not None:
        if wait_for == "ack" and not options["ack"]:
            raise UsageError("--wait ack needs --ack (only a message sent with --ack is acknowledged)")
        if options["mime_files"]:
            raise UsageError("--wait goes with a message of your own, not --mime files")
        wait = parse_duration(timeout).total_seconds()
    sent = _send(s, args, **options)
    if wait is not None and sent:
        from .cmd_track import wait_for as wait_until

        wait_until(s, sent, wait_for, wait)


def _refuse_with_stdin(options: dict, wait_for) -> None:
    clash = [flag for flag, given in (("--wait", wait_for is not None), ("--mime", bool(options["mime_files"])), ("--wake", options["wake"]), ("--id", options["message_id"] is not None)) if given]
    if clash:
        raise UsageError(f"--stdin does not go with {clash[0]}: each line is its own message (a line may carry its own \"id\")")


def _send(s: Settings, args: tuple[str, ...], subject, thread, priority, tags, broadcast, type_, ack, ack_wait, max_deliver, wake, mime_files, message_id=None) -> str | None:
    """Send and report; the message id (None for --mime files)."""
    if mime_files:
        if args or broadcast:
            raise UsageError("--mime FILE takes sender and recipients from the file: give no TO, MESSAGE or --broadcast")
        from .cmd_mime import send_files

        send_files(mime_files)
        return None
    if type_ is not None:
        from relayd.names import MESSAGE_TYPES

        if type_ not in MESSAGE_TYPES:
            s.warn(f"--type {type_!r} is not one of IGNITE's message types (docs/cli.md lists them); sending it anyway")
    if broadcast:
        if len(args) > 1:
            raise UsageError("with --broadcast give only the message (no recipient)")
        recipients: list[str] = []
        text = read_body(args[0] if args else None)
    else:
        if not args:
            raise UsageError("missing recipient: relayctl send TO MESSAGE (or --broadcast MESSAGE)")
        if len(args) > 2:
            raise UsageError("too many arguments: quote the message, e.g. relayctl send bob \"hello there\"")
        recipients = [name.strip() for name in args[0].split(",") if name.strip()]
        text = read_body(args[1] if len(args) > 1 else None)
    params = {
        "agent": s.require_agent("send"),
        "to": recipients,
        "broadcast": broadcast,
        "body": text,
        "subject": subject,
        "thread": thread,
        "priority": priority,
        "tags": list(tags),
        "type": type_,
        "ack": ack,
        "ack_wait": ack_wait,
        "max_deliver": max_deliver,
    }
    if message_id is not None:
        from relayd.dedup import check_id

        params["id"] = check_id(message_id.strip())
    result = s.call("send", params)
    s.warn_if_unregistered(result, "sent")
    messages = result["messages"]
    for failure in result.get("notifications", []):
        if not failure.get("ok", True):
            s.warn(f"notifying {failure.get('agent')} failed: {failure.get('error')}")
        elif failure.get("retry"):
            s.warn(f"trigger for {failure.get('agent')} held back ({failure.get('skipped')}); relayd retries it, or run 'relayctl redeliver'")
    already = set(result.get("duplicates", []))
    if s.json:
        s.out(messages if broadcast or len(messages) != 1 else messages[0])
    elif len(messages) == 1:
        if already:
            s.note(f"{messages[0]['to']} already has {messages[0]['id']}; not sent again")
        else:
            owed = " (owed until acknowledged: relayctl ack ID)" if ack else ""
            s.note(f"sent {messages[0]['id']} to {messages[0]['to']}{owed}")
    else:
        fresh = [m["to"] for m in messages if m["to"] not in already]
        if not fresh:
            s.note(f"all {len(messages)} recipients already have {messages[0]['id']}; not sent again")
            return messages[0]["id"]
        s.note(f"sent to {len(fresh)} agents: {', '.join(fresh)}" + (f" ({', '.join(sorted(already))} had it already)" if already else ""))
    if wake:
        from .cmd_wake import wake_and_report

        first = messages[0]
        wake_and_report(s, f"relay: message from {first['from']} to {', '.join(m['to'] for m in messages)}: {first['subject'][:80]}")
    return messages[0]["id"]


def read(s: Settings, from_, thread, since, unread, last, mark_read, tail, format_) -> None:
    params = {
        "agent": s.require_agent("read"),
        "from": from_,
        "thread": thread,
        "since": since,
        "unread": unread,
        "last": last,
        "mark_read": mark_read,
    }

    def report(result: dict) -> None:
        for bad in result.get("corrupt", []):
            s.warn(f"skipped a corrupt line in {bad['file']} at byte {bad['offset']}")

    render = render_message
    if format_ == "mime":
        if s.json:
            raise UsageError("--format mime and --json: choose one")
        from relayd.ignite.convert import from_message

        def render(message: dict) -> str:
            return from_message(message).to_text()

    if tail:
        from .follow import follow

        follow(s, params, render, report, exact=format_ == "mime")
        return
    result = s.call("read", params)
    report(result)
    messages = result["messages"]
    if format_ == "mime":
        # One document after another, each ending in a newline: split on "MIME-Version: 1.0"
        # at a line start, or export one message per file with `relayctl mime export`.
        for message in messages:
            text = render(message)
            echo(text, nl=not text.endswith("\n"), exact=True)
        return
    if s.json:
        s.out(messages)
        return
    if not messages:
        s.note("no unread messages" if unread else "no messages")
        return
    delivery = result.get("delivery", {})
    for message in messages:
        echo(render_message(message, delivery.get(message["id"])))
    if result["unread"] and not s.quiet:
        s.note(f"({result['unread']} unread)")


def heartbeat(s: Settings, task: str | None) -> None:
    result = s.call("heartbeat", {"agent": s.require_agent("heartbeat"), "task": task})
    s.out(result, lambda r: f"heartbeat {r['agent']} at {r['heartbeat']}")


def set_status(s: Settings, status: str, task: str | None) -> None:
    result = s.call("set_status", {"agent": s.require_agent("set-status"), "status": status, "task": task})
    s.out(result, lambda r: f"{r['name']}: {r['status']}" + (f" (task: {r['task']})" if r.get("task") else ""))


# -- reservations ------------------------------------------------------------------------


def repo_path(repo: str | None) -> str:
    """--repo, or the current directory, as a canonical absolute path."""
    return os.path.realpath(os.path.expanduser(repo) if repo else os.getcwd())


def reserve(s: Settings, pattern: str, repo, shared, ttl, reason, force, check) -> None:
    if repo is not None and not os.path.isdir(repo_path(repo)):
        # Most likely a typo: a reservation there would protect nobody's files.
        raise UsageError(f"--repo {repo}: no such directory (give the repository's path on this machine)")
    params = {
        "agent": s.require_agent("reserve"),
        "pattern": pattern,
        "repo": repo_path(repo),
        "shared": shared,
        "ttl": ttl,
        "reason": reason,
        "force": force,
        "check": check,
    }
    try:
        result = s.call("reserve", params)
    except Conflict as exc:
        exc.message += " (wait, ask the holder, or use --force)"
        raise
    if check:
        s.out(result, lambda r: _render_check(r, pattern, params["repo"]))
        if result["conflicts"]:
            raise SystemExit(1)  # (a conflict found is the answer, not an error: no error line)
        return
    s.warn_if_unregistered(result, "reserved")
    if result.get("overridden"):
        for holder in result["conflicts"]:
            s.warn(f"overriding: {render_holder(holder).strip()}")
    from relayd.reservations.globs import covers_everything  # (the pattern code: only a reserve that took one)

    held = result.get("reservation") or {}
    if held and covers_everything(held["pattern"]):
        s.warn(f"{held['pattern']} holds every file in {held['repo']} until {held['expires_at']}: release it when done (relayctl release {held['pattern']!r})")
    s.out(result, _render_reserved)


def release(s: Settings, pattern: str | None, repo, all_: bool) -> None:
    if all_ == (pattern is not None):
        raise UsageError("give a PATTERN to release, or --all (not both)")
    params = {"agent": s.require_agent("release"), "pattern": pattern, "all": all_, "repo": repo_path(repo) if (repo or not all_) else None}
    try:
        result = s.call("release", params)
    except NotOwner as exc:
        exc.message += " (or take it over with reserve --force)"
        raise

    def human(r: dict) -> str:
        if not r["released"]:
            return "nothing to release"
        return "\n".join(f"released {x['pattern']} in {x['repo']}" for x in r["released"])

    s.out(result, human)


def reservations(s: Settings, repo, holder, expired) -> None:
    result = s.call("reservations", {"repo": repo_path(repo) if repo else None, "agent": holder, "expired": expired})

    def human(rows: list[dict]) -> str:
        if not rows:
            return "no reservations" if expired else "no active reservations"
        return "\n".join(
            f"{clip(r['pattern'], 28):<28} {r['agent']:<16} {_kind(r):<10} {_expiry(r):<18} {visible(r['repo'])}" + (f"  ({clip(r['reason'], 40)})" if r.get("reason") else "")
            for r in rows
        )

    s.out(result, human)


def handoff(s: Settings, to: str, patterns: list[str], message: str, all_: bool, repo, thread, ttl) -> None:
    """Move the reservations (one operation, atomic), then send the brief listing them."""
    sender = s.require_agent("handoff")
    body = read_body(message)
    result = s.call("handoff", {"agent": sender, "to": to, "patterns": patterns, "all": all_, "repo": repo_path(repo), "thread": thread, "ttl": ttl})
    from relayd.reservations.handoff import brief as handoff_brief  # (the fast path loads this module; the wing only here)

    brief = handoff_brief(sender, body, result["handed"], result["repo"])
    sent = s.call("send", {"agent": sender, "to": [to], "body": brief, "subject": "handoff: " + clip(body, 70), "thread": thread, "tags": ["handoff"]})
    message_id = sent["messages"][0]["id"]
    if s.json:
        s.out({"handed": result["handed"], "to": to, "repo": result["repo"], "brief": message_id})
        return
    s.note(f"handed {len(result['handed'])} reservation{'s' if len(result['handed']) != 1 else ''} in {result['repo']} to {to}: " + ", ".join(r["pattern"] for r in result["handed"]))
    s.note(f"brief sent as {message_id} (relayctl track {message_id} says when {to} has read it)")


def _expiry(r: dict) -> str:
    left = iso_seconds(r["expires_at"]) - time.time()
    return f"expires in {short_span(left)}" if left > 0 else f"EXPIRED {short_span(left)} ago"


def _kind(r: dict) -> str:
    return "exclusive" if r.get("exclusive", True) else "shared"


def render_holder(r: dict) -> str:
    return visible(f"  {r['agent']} holds {r['pattern']} ({_kind(r)}, {_expiry(r)}, until {r['expires_at']})" + (f" — {r['reason']}" if r.get("reason") else ""))


def _render_check(r: dict, pattern: str, repo: str) -> str:
    if not r["conflicts"]:
        return f"free: nobody else holds anything overlapping {pattern} in {repo}"
    return f"{pattern} in {repo} conflicts with:\n" + "\n".join(render_holder(c) for c in r["conflicts"])


def _render_reserved(r: dict) -> str:
    res = r["reservation"]
    verb = "renewed" if r.get("renewed") else "reserved"
    return f"{verb} {res['pattern']} in {res['repo']} ({_kind(res)}, {_expiry(res)}, until {res['expires_at']})"


def _pane_states(agents: list[dict]) -> None:
    """`pane: {"id", "state"}` for agents whose notify target is a tmux pane."""
    if any(str(a.get("notify") or "").startswith("tmux:") for a in agents):
        from relayd.arrival.notify import add_pane_states

        add_pane_states(agents)


def _program_versions(agents: list[dict]) -> list[dict]:
    """The version of each agent program the team runs, as found on this PATH, against the
    version relay is tested with: `{"program", "version", "tested", "older"}` once a program."""
    programs = {a.get("program") for a in agents if a.get("program")}
    if not programs:
        return []
    from relayd.programs import installed  # (only a team with agent programs looks)
    from relayd.programs.registry import named

    found: dict[str, dict] = {}
    for given in sorted(programs):
        spec = named(given)
        if spec is None or spec.name in found:
            continue
        version = installed.version(spec)
        if version:
            found[spec.name] = {"program": spec.name, "version": version, "tested": spec.tested, "package": spec.package,
                                "older": installed.older(version, spec.tested)}
    return list(found.values())


def _agent_line(a: dict) -> str:
    state = "alive" if a["alive"] else "ARCHIVED" if a.get("archived") else "NEW" if a["last_heartbeat"] is None else "STALE"
    if (a.get("pane") or {}).get("state") in ("dead", "gone"):
        state = "EXITED"  # its pane's program is not running, whatever its last heartbeat says (what `up` reports)
    if a["last_heartbeat"] is None:
        beat = "never"
    else:
        beat = f"{short_span(a['age_seconds'] or 0)} ago"
    status = f"   status: {clip(a['status'], 20)}" if a.get("status") else ""
    role = f"   role: {clip(a['role'], 20)}" if a.get("role") else ""
    pane = f"   pane {a['pane']['id']} {a['pane']['state']}" if a.get("pane") else ""
    session = f"   session: {_SESSION.get(a['session'], a['session'])}" if a.get("session") else ""
    return f"  {a['name']:<16} {state:<7} last heartbeat: {beat:<10} task: {clip(a.get('task'), 40) or '(unknown)'}{status}{role}{pane}{session}"


# What an agent's program is doing, as its hooks report it (relayd.arrival.program_state).
_SESSION = {"idle": "at its prompt", "working": "working", "asking": "ASKING the person (no trigger typed until answered)",
            "ended": "ended", "stopped": "stopped (relayctl down)"}


def _arrival_line(a: dict) -> str:
    """How the agent's mail reaches it (register --notify, or its session's own door: its
    Claude Code inbox, its Codex queue) and how that last went; why its session's door is not
    used, when it is not."""
    line = _arrival_told(a)
    said = a.get("door_said")
    if said:
        words = {"held": "held for the person's approval", "denied": "denied by the person"}.get(said["status"], said["status"])
        line += f"\n  {'':<16} Claude Code: {words} {ago(parse_iso(said['at']))} (message {said['id']})"
    if a.get("door_unusable"):
        line += f"\n  {'':<16} not its {clip(a['door_unusable'], 100)}"
    return line


def _arrival_told(a: dict) -> str:
    told = a.get("announced")
    line = f"  {a['name']:<16} {clip(a['arrives_by'], 20):<20} "
    if told is None:
        if a["arrives_by"] == "none":
            return line + "not announced: it sees mail when it reads (register --notify to change)"
        return line + ("never told" if a.get("never_told") else "not told in 24h")
    by = "" if told["how"] == a["arrives_by"].partition(":")[0] else f" by {told['how']}"
    if told["ok"]:
        return line + (f"told earlier{by}; not read since" if told.get("note") else f"told{by} {ago(parse_iso(told['at']))}")
    since = ("before " if told.get("earlier") else "") + shown(told.get("failing_since") or told["at"])
    times = told.get("failures") or 1
    how_often = f"{times} times in a row, last {ago(parse_iso(told['at']))}" if times > 1 else "once"
    return line + f"FAILING{by} since {since}, {how_often}: {clip(told.get('error'), 80)}"


def _bridge_line(b: dict) -> str:
    line = f"bridge: {b['state']} ({b['url']}) as host {b['host']}, backlog {b.get('backlog', 0)}"
    if b.get("last_error") and b["state"] != "connected":
        line += f"; last error: {clip(b['last_error'], 80)}"
    for name, owner in sorted((b.get("name_conflicts") or {}).items()):
        line += f"\n  warning: agent name {name} is owned by host {owner}; mail for it goes there"
    for host, c in sorted((b.get("from_hosts") or {}).items()):
        if c.get("held") or c.get("refused"):  # a host that met its budget or sent what fails the checks
            hour, budget = c["this_hour"], b.get("budget") or {}
            line += f"\n  from host {clip(host, 40)}: {hour['messages']} messages ({hour['bytes'] / 1048576:.1f} of {budget.get('mib_per_hour', '?')} MiB) stored this hour, {c['held']} held in JetStream over its budget, {c['refused']} refused ({c['refused_unrecorded']} not recorded)"
    return line


def _remote_agent_line(a: dict) -> str:
    if a.get("alive") is None:  # from the last directory relayd saw: no presence
        return f"  {a['name']:<16} @{a['host']:<14} (relayd not running: presence unknown)"
    return _agent_line(a).replace(f"  {a['name']:<16} ", f"  {a['name']:<16} @{clip(a['host'], 13):<14}", 1)


def _reservation_line(r: dict) -> str:
    expires = parse_iso(r["expires_at"])
    left = (expires - now()).total_seconds()
    when = f"expires in {short_span(left)}" if left > 0 else f"EXPIRED {short_span(left)} ago"
    kind = "exclusive" if r.get("exclusive", True) else "shared"
    repo = r.get("repo", "").rstrip("/").rsplit("/", 1)[-1]
    return f"  {clip(r['pattern'], 20):<20} {r['agent']:<13} {kind:<11} {when:<16} {repo}"


def _command_line(c: dict) -> str:
    return f"  {c['id'][:13]}...   {c['from']} → {c['target_session']}   {clip((c['command'] + ' ' + c.get('args', '')).strip(), 40)}   {ago(parse_iso(c['ts']))}"


def _daemon_state(daemon: dict) -> str:
    if daemon.get("running"):
        return "running"
    if daemon.get("hung"):
        return "not answering (stopped or stuck?; direct mode)"
    return "not running (direct mode)"


def paused_line(p: dict) -> str:
    """One exchange the loop breaker paused, as `status` and `budget` show it."""
    a, b = p["agents"]
    return (f"{a} <-> {b}: {p['count']} messages back and forth since {p['since'][11:19]} UTC; "
            f"their mail is stored, not announced, until {p['until'][11:19]} UTC or: relayctl budget resume {a} {b}")


def render_status(r: dict, sections: set[str]) -> str:
    lines = []
    daemon = r.get("daemon")
    if daemon is not None:
        lines.append(f"relayd: {_daemon_state(daemon)}")
        lines.append("")
    bridge = r.get("bridge")
    if bridge is not None:
        lines.append(_bridge_line(bridge))
        lines.append("")
    if "agents" in sections:
        agents = r["agents"]
        alive = sum(1 for a in agents if a["alive"])
        new = sum(1 for a in agents if a["last_heartbeat"] is None)  # created by a preset, never run yet
        lines.append(f"AGENTS ({alive} alive, {len(agents) - alive - new} stale" + (f", {new} never seen)" if new else ")"))
        lines.extend(_agent_line(a) for a in agents)
        for p in r.get("programs", []):
            if p["older"]:
                lines.append(f"  warning: {p['program']} is {p['version']}, older than the {p['tested']} relay is tested with: "
                             f"npm install -g {p['package']}@{p['tested']}")
        lines.append("")
        if any(a.get("announced") or a.get("held") or a.get("arrives_by", "channel") != "channel" for a in agents):
            # Only when there is something to say: relay-mcp's channel that told nobody yet says nothing.
            failing = sum(1 for a in agents if a.get("announced") and not a["announced"]["ok"])
            held = sum(1 for a in agents if a.get("held"))
            lines.append(f"MAIL ARRIVAL ({failing} failing" + (f", mail HELD for {held})" if held else ")"))
            for a in agents:
                lines.append(_arrival_line(a))
                if a.get("held"):
                    lines.append(f"  {'':<16} {held_line(a['held'])}")
            lines.append("")
        if r.get("paused"):
            lines.append(f"LOOP BREAKER ({len(r['paused'])} paused)")
            lines.extend("  " + paused_line(p) for p in r["paused"])
            lines.append("")
        spent = [a for a in agents if a.get("context")]
        if spent:
            # What relay's own words cost each model (relayd.delivery.spend): triggers, doors, hooks, tool results.
            lines.append(f"RELAY IN CONTEXT (last hour, ~{sum(a['context']['tokens'] for a in spent)} tokens)")
            lines.extend(f"  {a['name']:<16} ~{a['context']['tokens']} tokens in {a['context']['handed']} hand-overs ("
                         + ", ".join(f"{kind} {tokens}" for kind, tokens in a["context"]["by"].items()) + ")" for a in spent)
            lines.append("")
        if bridge is not None and bridge.get("agents"):
            remote = bridge["agents"]
            alive = sum(1 for a in remote if a.get("alive"))
            lines.append(f"AGENTS ON OTHER HOSTS ({alive} alive, {len(remote) - alive} stale)")
            lines.extend(_remote_agent_line(a) for a in remote)
            lines.append("")
    if "reservations" in sections:
        res = r.get("reservations", [])

        expired = sum(1 for x in res if parse_iso(x["expires_at"]) <= now())
        lines.append(f"RESERVATIONS ({len(res) - expired} active, {expired} expired)")
        lines.extend(_reservation_line(x) for x in res)
        lines.append("")
        theirs = (bridge or {}).get("reservations") or []
        if theirs:
            lines.append(f"RESERVATIONS ON OTHER HOSTS ({len(theirs)})")
            lines.extend(_reservation_line(x) + f"  @{x['host']}" for x in theirs)
            lines.append("")
    if "commands" in sections:
        cmds = r.get("commands", [])
        lines.append(f"PENDING COMMANDS ({len(cmds)})")
        lines.extend(_command_line(c) for c in cmds)
        lines.append("")
    delivery = r.get("delivery")
    if "agents" in sections and delivery and (delivery["owed"] or delivery["dead_letters"]):
        # Only when there is something: most teams never send with --ack.
        lines.append(f"DELIVERY ({delivery['owed']} owed, {delivery['dead_letters']} dead letters: relayctl dlq list)")
        for name in sorted(set(delivery["owed_by_agent"]) | set(delivery["dead_letters_by_agent"])):
            lines.append(f"  {name:<16} owed: {delivery['owed_by_agent'].get(name, 0):<5} dead letters: {delivery['dead_letters_by_agent'].get(name, 0)}")
        lines.append("")
    return "\n".join(lines).rstrip()


def status(s: Settings, only_agents: bool, only_reservations: bool, only_commands: bool, stale: str) -> None:
    result = s.call("status", {"stale": stale})
    _pane_states(result.get("agents", []))
    result["programs"] = _program_versions(result.get("agents", []))
    client = s.client()
    # hung: relayd is there (its socket accepts) and did not answer within the answer wait
    result["daemon"] = {"running": getattr(client, "mode", "direct") == "daemon", "hung": getattr(client, "silent", False), "socket": client.socket_path}
    chosen = {name for name, on in (("agents", only_agents), ("reservations", only_reservations), ("commands", only_commands)) if on} or {"agents", "reservations", "commands"}
    for name in {"agents", "reservations", "commands"} - chosen:  # --json shows what the text shows
        del result[name]
    if "agents" not in chosen:
        result.pop("delivery", None)  # the text shows it with the agents
    s.out(result, lambda r: render_status(r, chosen))
