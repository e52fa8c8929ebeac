// relay's OpenCode plugin: unread relay mail becomes context for the model.
// Written by `relayctl hooks install --for opencode` into .opencode/plugin/relay.js;
// `relayctl hooks uninstall --for opencode` removes it. Tried with OpenCode 1.18.33.
//
// Every decision about mail is relayctl's (`relayctl hook opencode`, one JSON event on
// stdin, the answer on stdout); this file only passes OpenCode's events on and puts the
// answers where OpenCode's model reads them:
//   chat.message        the person's prompt: the mail goes in as one more (synthetic) part
//   tool.execute.after  the mail is appended to the tool's output
//   session.idle        the turn ended: with mail waiting, one new turn carries it; mail
//                       that came during a turn relay started gets the next one (no pane
//                       trigger follows here, as it does for the other programs), none in
//                       `opencode run`, which exits there
// Mail handed over counts as read once the model's request carried it: OpenCode runs these
// hooks a second or more before its request, so the answer lists the messages (`handed`) and
//   message.part.updated   a step-start part: the model's answer began, after its request;
//                          the handed mail is read from now on
//   session.error          the model call failed: mail of that turn is unread again, and no
//                          turn is started for the session until its person's next prompt; the
//                          person stopped the turn (Esc) before the model's answer began: its
//                          mail was never read, and stays so until that next prompt too (a turn
//                          of relay's for it at once would undo the person's stop); its senders
//                          are told the person stopped it
// It also reports the session's state (relayd.arrival.program_state): a permission or question
// open is "asking", and no turn is started then. While the session sits idle, mail that
// comes (`relayctl subscribe inbox`, which needs relayd) starts a turn the same way, and so
// does mail that was waiting when OpenCode started; the person's unsent draft lives in
// OpenCode's own prompt box and is not touched by that.

import { spawn } from "node:child_process"

const RELAYCTL = /* relay: relayctl argv */ ["relayctl", "hook", "opencode"] /* end */
const AGENT = /* relay: agent */ null /* end */
// `opencode run PROMPT` ends at its session's first idle, before any turn started then
// would run: there, mail waiting at the end stays unread (for the next session).
const ONE_SHOT = process.argv[2] === "run"
// Milliseconds from the plugin's start to its look for mail that waited for OpenCode: by then
// `relayctl subscribe` listens, and the TUI can show the session made for the mail.
const STARTED_WAIT = 1500

// OpenCode does not wait for one event's handler before it calls the next, and two relayctl
// runs started a moment apart may end in either order: a turn's first step ("working") could
// be recorded after the turn's end ("idle"), and the session would read as busy at its prompt
// for good; a failure right after a step could come before that step's "read". So each run
// starts once the one before it has ended: relay hears the events in OpenCode's order.
let lastRun = Promise.resolve()
function relay(event, fields = {}) {
  const run = lastRun.then(() => runRelayctl(event, fields))
  lastRun = run
  return run
}

function runRelayctl(event, fields) {
  return new Promise((resolve) => {
    const child = spawn(RELAYCTL[0], RELAYCTL.slice(1), { stdio: ["pipe", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (err += chunk))
    child.on("error", () => resolve(null))
    child.on("close", () => {
      if (err.trim()) console.error(err.trim())
      try {
        resolve(out.trim() ? JSON.parse(out) : null)
      } catch {
        resolve(null)
      }
    })
    child.stdin.end(JSON.stringify({ hook_event_name: event, ...fields }))
  })
}

let counter = 0
// OpenCode's part ids: "prt_", 12 hex digits of milliseconds * 4096 + a counter, 14 more.
function partId() {
  counter = (counter + 1) % 4096
  const time = (BigInt(Date.now()) * 4096n + BigInt(counter)).toString(16).padStart(12, "0")
  let tail = ""
  while (tail.length < 14) tail += Math.random().toString(36).slice(2)
  return "prt_" + time + tail.slice(0, 14)
}

export const RelayPlugin = async ({ client }) => {
  const asking = new Map() // session -> open permissions and questions
  const carrying = new Set() // sessions whose next prompt is the mail relay handed over
  const busy = new Set()
  let idleSession = null // the session sitting idle at its prompt, if any
  const sessions = new Set() // the sessions of this OpenCode (a person's first prompt makes one)
  const handing = new Map() // session -> ids of the mail handed over, not yet in a model request
  // Sessions that get no turn of relay's until the person's next prompt: the last model call
  // failed, or the person stopped a turn before the model saw the mail it carried.
  const untilPrompt = new Set()

  function handed(sessionID, answer) {
    if (!Array.isArray(answer?.handed)) return
    handing.set(sessionID, [...new Set([...(handing.get(sessionID) ?? []), ...answer.handed])])
  }

  async function atIdle(sessionID) {
    if (busy.has(sessionID) || (asking.get(sessionID) ?? 0) > 0 || untilPrompt.has(sessionID)) return
    const answer = await relay("session.idle", { session_id: sessionID, stop_hook_active: ONE_SHOT })
    if (ONE_SHOT || !answer || answer.decision !== "block" || typeof answer.reason !== "string") return
    handed(sessionID, answer)
    idleSession = null
    carrying.add(sessionID)
    try {
      await client.session.promptAsync({ path: { id: sessionID }, body: { parts: [{ type: "text", text: answer.reason }] } })
    } catch (error) {
      carrying.delete(sessionID)
      throw error
    }
  }

  // Mail before the person has asked anything: no session exists yet, so one is made for
  // the mail and shown in the TUI (as if it had been picked from the session list).
  let starting = false
  async function firstSession() {
    if (starting) return
    starting = true
    try {
      const created = await client.session.create({ body: {} })
      const id = created?.data?.id
      if (!id) return
      idleSession = id
      await client.tui.publish({ body: { type: "tui.session.select", properties: { sessionID: id } } }).catch(() => {})
      await atIdle(id)
    } finally {
      starting = false
    }
  }

  // Mail for a session that sits idle: one `relayctl subscribe inbox` runs for as long as
  // OpenCode does (started now, so it listens before the session's first idle); an event
  // while the session is idle is handled as at a turn's end. Without relayd it retries.
  // The agent whose mail this OpenCode looks for by itself: none in `opencode run`, which
  // ends before a turn it started would run, nor in a session without an agent name.
  const agent = ONE_SHOT ? null : AGENT ?? process.env.RELAY_AGENT ?? process.env.OVLD_ROLE

  // relayctl ARGS with the store options relay's hooks were installed with (output read, no input).
  function relayctlRun(...args) {
    const argv = [...RELAYCTL.slice(0, RELAYCTL.indexOf("hook")), ...args]
    return spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "ignore"] })
  }

  function waitForMail() {
    const child = relayctlRun("subscribe", "inbox", "--for", agent)
    const end = () => child.kill()
    process.once("exit", end) // it must not outlive OpenCode
    child.on("error", () => {})
    child.stdout.on("data", mailCame)
    child.on("close", () => {
      process.off("exit", end)
      setTimeout(waitForMail, 5000).unref?.()
    })
  }

  function mailCame() {
    if (idleSession) atIdle(idleSession)
    else if (!sessions.size) firstSession()
  }

  // Mail that came while no OpenCode ran here (sent before it started, or across a restart)
  // makes no event now: it is looked for once, when the subscription above has had a moment
  // to start listening, so that mail sent meanwhile is found by one or the other.
  function mailWaiting() {
    const child = relayctlRun("--json", "--agent", agent, "read", "--unread", "--last", "1")
    let out = ""
    child.on("error", () => {})
    child.stdout.on("data", (chunk) => (out += chunk))
    child.on("close", () => {
      try {
        const unread = JSON.parse(out)
        if (Array.isArray(unread) && unread.length) mailCame()
      } catch {} // no answer (no store yet, relayctl gone): nothing to look at
    })
  }

  if (agent) {
    waitForMail()
    setTimeout(mailWaiting, STARTED_WAIT).unref?.()
  }

  return {
    "chat.message": async (input, output) => {
      idleSession = null
      // The prompt relay itself just started carries the mail (and its answer said
      // "working"): asking again would only hold the model's request up by a relayctl run.
      if (carrying.delete(input.sessionID)) return
      untilPrompt.delete(input.sessionID) // the person's prompt: a new try
      const answer = await relay("chat.message", { session_id: input.sessionID })
      if (answer && typeof answer.additionalContext === "string") {
        handed(input.sessionID, answer)
        output.parts.push({
          id: partId(),
          messageID: output.message.id,
          sessionID: input.sessionID,
          type: "text",
          text: answer.additionalContext,
          synthetic: true,
        })
      }
    },
    "tool.execute.after": async (input, output) => {
      // A built-in tool's result is `output.output` (text); an MCP server's tool's (relay's
      // own included) is the server's answer, whose `content` list the model is shown.
      // Anything else has no place for mail: it is not taken (it stays unread).
      const text = typeof output?.output === "string"
      if (!text && !Array.isArray(output?.content)) return
      const answer = await relay("tool.execute.after", { session_id: input.sessionID, tool_name: input.tool })
      if (!answer || typeof answer.additionalContext !== "string") return
      handed(input.sessionID, answer)
      if (text) output.output += "\n\n" + answer.additionalContext
      else output.content.push({ type: "text", text: answer.additionalContext })
    },
    event: async ({ event }) => {
      const props = event.properties ?? {}
      const sessionID = props.sessionID ?? props.info?.id
      switch (event.type) {
        case "session.created": {
          if (props.info?.parentID) break
          sessions.add(sessionID)
          const answer = await relay("session.created", { session_id: sessionID })
          if (typeof answer?.notice === "string") {
            // a session without an agent name: relay's line on how to start it as one
            const toast = { body: { title: "relay", message: answer.notice, variant: "warning", duration: 30000 } }
            await Promise.resolve().then(() => client.tui.showToast(toast)).catch(() => {}) // no TUI (`opencode run`): nowhere to show it
          }
          break
        }
        case "session.status":
          if (props.status?.type === "busy") {
            busy.add(sessionID)
            if (idleSession === sessionID) idleSession = null
          } else busy.delete(sessionID)
          break
        case "session.idle": {
          busy.delete(sessionID)
          idleSession = sessionID
          // At rest, and nothing handed over: the turn's end is reported as a continuation's
          // (`stop_hook_active`), which hands no mail.
          if (untilPrompt.has(sessionID)) await relay("session.idle", { session_id: sessionID, stop_hook_active: true })
          else await atIdle(sessionID)
          break
        }
        case "permission.asked":
        case "question.asked":
          asking.set(sessionID, (asking.get(sessionID) ?? 0) + 1)
          await relay(event.type, { session_id: sessionID })
          break
        case "permission.replied":
        case "question.replied":
        case "question.rejected":
          asking.set(sessionID, Math.max(0, (asking.get(sessionID) ?? 1) - 1))
          await relay(event.type, { session_id: sessionID })
          break
        case "message.part.updated": {
          // A step starts once the model's answer began: its request carried the mail.
          const part = props.part ?? {}
          const ids = handing.get(part.sessionID)
          if (part.type !== "step-start" || !ids) break
          handing.delete(part.sessionID)
          untilPrompt.delete(part.sessionID)
          await relay("message.part.updated", { session_id: part.sessionID, handed: ids })
          break
        }
        case "session.error": {
          if (!sessionID) break
          const unseen = handing.delete(sessionID) // never in a request that reached the model: still unread
          const error = props.error?.name
          // Stopped by the person (Esc) or by OpenCode's own end (`relayctl down`): the model
          // call did not fail. Stopped after the model's answer began, the mail was read; before,
          // it waits for the person's next prompt, and relay tells its senders so.
          if (error === "MessageAbortedError" && !unseen) break
          untilPrompt.add(sessionID)
          await relay("session.error", { session_id: sessionID, error })
          break
        }
        case "session.deleted":
          if (idleSession === sessionID) idleSession = null
          await relay("session.deleted", { session_id: sessionID })
          break
      }
    },
  }
}
