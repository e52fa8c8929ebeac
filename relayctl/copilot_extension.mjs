// relay's GitHub Copilot CLI extension: a notice of new relay mail, put into the session's own queue.
// Written by `relayctl hooks install --for copilot --extension` (and by `relayctl up` for an
// agent whose team file says `extension = true`) into .github/extensions/relay/extension.mjs;
// `relayctl hooks uninstall --for copilot` removes it. Tried with Copilot CLI 1.0.102, which
// loads extensions only when started with --experimental.
//
// Which mail to tell of, and in what words, is relay's (relayd.arrival.copilot_extension);
// this file opens the door and decides only when Copilot can take a notice. It joins the session, listens on a socket of its own in a folder
// only this user may enter (`<$XDG_RUNTIME_DIR or /tmp/relay-copilot-UID>/AGENT.sock`,
// AGENT being the pane's RELAY_AGENT, as `relayctl up` sets it), and tells relay it is
// there (`relayctl hook copilot sessionStart`, as relay's hooks report a session's door).
// relay connects (checking the socket is this user's and so is the process answering) and
// sends one JSON line, {"op": "enqueue", "prompt": TEXT, "asking_since": TIME?}; the extension gives TEXT to the
// session with mode "enqueue" (the next turn: at once when the session is idle, after the
// running turn otherwise; never "immediate", which was seen to move a just-approved
// command to the background) and answers {"ok": true, "id": ...} once Copilot took it.
// A question on screen and the person's unsent draft are Copilot's, and stay as they are.
// While a permission question is open the notice is held here, not enqueued (Copilot
// 1.0.102 drops what was enqueued when the person declines one), and goes when the session
// is idle again; the answer then says {"ok": true, "held": ...}. `asking_since` is relay's word
// that its hooks saw a question open then, which may come before Copilot tells this process.

import { joinSession } from "@github/copilot-sdk/extension"
import { spawn } from "node:child_process"
import { chmodSync, lstatSync, mkdirSync, unlinkSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"

const RELAYCTL = /* relay: relayctl argv */ ["relayctl", "hook", "copilot", "sessionStart"] /* end */
const AGENT = process.env.RELAY_AGENT || process.env.OVLD_ROLE || ""
const LINE_MAX = 64 * 1024 // one request; a notice is far shorter

function socketFolder() {
  const runtime = process.env.XDG_RUNTIME_DIR
  return runtime ? join(runtime, "relay-copilot") : `/tmp/relay-copilot-${process.getuid()}`
}

// The folder must be this user's own and closed to everyone else, or nothing listens there.
function privateFolder(folder) {
  mkdirSync(folder, { recursive: true, mode: 0o700 })
  const found = lstatSync(folder)
  if (!found.isDirectory() || found.uid !== process.getuid() || (found.mode & 0o077) !== 0) {
    throw new Error(`${folder} is not a folder of this user's alone`)
  }
}

function reportDoor() {
  const child = spawn(RELAYCTL[0], RELAYCTL.slice(1), { stdio: ["pipe", "ignore", "ignore"] })
  child.on("error", () => {})
  child.stdin.end(JSON.stringify({ timestamp: Date.now(), cwd: process.cwd() })) // as Copilot gives its hooks: no event name
}

// Whether a permission question is open: Copilot 1.0.102 tells an extension of one only by
// its permissionRequest hook's run (no permission.* event reaches it); the tool's end, an
// abort (the person declined) or the session at rest closes it. Notices held meanwhile go
// at the next rest: an abort drops what was enqueued before it.
let asking = false
// When this process last saw the session come to rest (ms since the epoch; 0: not yet).
let restedAt = 0
const held = []

function watchQuestions(session) {
  session.on("hook.start", (event) => {
    if (event?.data?.hookType === "permissionRequest") asking = true
  })
  session.on("tool.execution_complete", () => (asking = false))
  session.on("abort", () => (asking = false))
  session.on("session.idle", () => {
    asking = false
    restedAt = Date.now()
    while (held.length) session.send({ prompt: held.shift(), mode: "enqueue" }).catch(() => {})
  })
}

// `questionSince`: when relay's own permissionRequest hook reported a question (ms). Copilot
// runs that hook before it shows the question, but may tell this process of it later (seen
// on a loaded machine, its other events late too): relay's word holds the notice as well,
// unless the session has come to rest since (a declined question runs no hook, so the word
// outlives it).
async function enqueue(session, prompt, questionSince) {
  if (asking || held.length || questionSince > restedAt) {
    held.push(prompt)
    return { ok: true, held: "a question is open in the session: relay's extension enqueues the notice once the session is idle again" }
  }
  return { ok: true, id: await session.send({ prompt, mode: "enqueue" }) }
}

function serve(session, path) {
  const server = createServer((conn) => {
    let pending = ""
    conn.setEncoding("utf8")
    conn.on("error", () => {})
    conn.on("data", async (chunk) => {
      pending += chunk
      if (pending.length > LINE_MAX) return conn.destroy()
      const end = pending.indexOf("\n")
      if (end < 0) return
      const line = pending.slice(0, end)
      pending = pending.slice(end + 1)
      let answer
      try {
        const request = JSON.parse(line)
        if (request.op === "hello") answer = { ok: true, agent: AGENT, pid: process.pid }
        else if (request.op === "enqueue" && typeof request.prompt === "string") answer = await enqueue(session, request.prompt, Date.parse(request.asking_since) || 0)
        else answer = { ok: false, error: "unknown request" }
      } catch (error) {
        answer = { ok: false, error: String(error?.message ?? error).slice(0, 300) }
      }
      conn.end(JSON.stringify(answer) + "\n")
    })
  })
  server.on("error", () => {})
  try {
    unlinkSync(path) // an earlier session's socket for this agent; relay checks which process answers
  } catch {}
  server.listen(path, () => {
    chmodSync(path, 0o600)
    reportDoor()
  })
  const close = () => {
    try {
      unlinkSync(path)
    } catch {}
  }
  process.once("exit", close)
  process.once("SIGTERM", () => {
    close()
    process.exit(0)
  })
}

const session = await joinSession({})
if (AGENT && /^[a-z0-9][a-z0-9_-]{0,63}$/.test(AGENT)) {
  const folder = socketFolder()
  try {
    privateFolder(folder)
    watchQuestions(session)
    serve(session, join(folder, `${AGENT}.sock`))
  } catch (error) {
    await session.log(`relay: no mail door for ${AGENT}: ${error?.message ?? error}`, { level: "warning" }).catch(() => {})
  }
}
