// relay web view: renders the state streamed from /api/events. Every value that comes
// from the store (names, tasks, subjects, bodies) is set with textContent, never parsed
// as HTML: a message is untrusted input.
"use strict";

// The access token arrives in the address's fragment (#token=..., never sent to a server)
// and is kept in sessionStorage, which is this origin's alone: unlike a cookie, a server on
// another port of 127.0.0.1 never sees it. It leaves the address bar at once.
const TOKEN = (() => {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) {
    sessionStorage.setItem("relay-token", given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("relay-token");
})();
const $ = (id) => document.getElementById(id);
let state = null;
let filter = null; // null: the live newest-first list; else the search parameters shown
let searchTimer = null;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

// A stored time as relayctl read, dlq list and the hooks print it: UTC, to the minute, dated, labelled.
function shown(iso) {
  return iso ? iso.slice(0, 16).replace("T", " ") + " UTC" : "";
}

// Its team pane (a tmux notify target), as relayctl status shows it: live, dead (its program exited) or gone.
function pane(a) {
  if (!a.pane) return null;
  return el("span", { class: "badge pane " + a.pane.state, title: `${a.name}'s pane: ${a.pane.state === "live" ? "its program runs there" : a.pane.state === "dead" ? "its program exited; relayctl up restarts it" : "no such pane any more"}`, text: `pane ${a.pane.id} ${a.pane.state}` });
}

// Mail that waits, and why (status's `held`: {why, since}; a `count` when given).
function held(a) {
  const h = a.held;
  if (!h) return null;
  const why = h.why || h.reason || "";
  const count = h.count ? `${h.count} waiting, ` : "";
  return el("div", {}, el("span", { class: "badge held", title: `mail for ${a.name} is not in front of its model: ${why}`, text: `held: ${count}since ${shown(h.since)}: ${why}` }));
}

// Why the session's own door (its Claude Code inbox, its Codex queue) is not used, as relayctl status says it.
function doorUnusable(a) {
  if (!a.door_unusable) return null;
  return el("div", { class: "muted door-unusable", title: `${a.name}'s mail goes by ${a.arrives_by}, not its session's own door`, text: `not its ${a.door_unusable}` });
}

// What relay itself put into the agent's model's context in the last hour (status's `context`).
function spent(a) {
  const c = a.context;
  if (!c) return null;
  const by = Object.entries(c.by).map(([kind, tokens]) => `${kind} ${tokens}`).join(", ");
  return el("span", { class: "badge", title: `relay's own text in ${a.name}'s model's context, last hour: ${by}`, text: `~${c.tokens} tokens/h` });
}

// Exchanges the loop breaker paused (state.paused), each with the command that resumes it.
function renderPaused(paused) {
  $("paused").replaceChildren(...paused.map((p) => el("div", { class: "badge held", text:
    `paused: ${p.agents[0]} ↔ ${p.agents[1]}, ${p.count} messages back and forth since ${shown(p.since)}; until ${shown(p.until)} or: relayctl budget resume ${p.agents[0]} ${p.agents[1]}` })));
}

// The session's own door's newest receipt (status's `door_said`), in relayctl status's and track's words.
const DOOR_WORDS = { held: "held for the person's approval", denied: "denied by the person", refused: "refused by its settings" };

function doorSaid(a) {
  const d = a.door_said;
  if (!d) return null;
  return el("div", { class: "muted door-said", title: `${a.name}'s Claude Code session's own receipt for message ${d.id}` + (d.detail ? `: ${d.detail}` : ""),
    text: `Claude Code: ${DOOR_WORDS[d.status] || d.status} ${shown(d.at)}` });
}

function arrival(a) {
  const cell = arrivalCell(a);
  const extra = [doorSaid(a), doorUnusable(a), pane(a), held(a), spent(a)].filter(Boolean);
  if (extra.length) cell.append(" ", ...extra);
  return cell;
}

function arrivalCell(a) {
  const told = a.announced;
  // A long notify target (a tmux socket path, a command line) is cut short: the full one shows on hover.
  const how = el("span", { class: "muted clip", title: `${a.arrives_by}: how new mail is announced to ${a.name} (relayctl register --notify)`, text: a.arrives_by });
  if (!told || told.ok) return el("td", {}, how);
  // Failing announcements are retried every few seconds: say since when and how often, as relayctl status does.
  const since = (told.earlier ? "before " : "") + shown(told.failing_since || told.at);
  const text = told.failures > 1 ? `failed ${told.failures} times since ${since}: ` : `failed ${shown(told.at)}: `;
  return el("td", {}, how, " ", el("span", { class: "badge failed", title: `announcing by ${told.how} has failed ${told.failures || 1} times in a row since ${since}; last at ${shown(told.at)}: ${told.error || ""}`, text: text + (told.error || "") }));
}

function until(iso) {
  const left = (Date.parse(iso) - Date.now()) / 1000;
  if (left <= 0) return "expired";
  if (left < 3600) return "in " + Math.ceil(left / 60) + "m";
  return "in " + Math.floor(left / 3600) + "h" + String(Math.floor((left % 3600) / 60)).padStart(2, "0");
}

function fill(tbody, rows, empty, columns) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "muted", colspan: columns, text: empty }))]));
}

// What an agent's program is doing, from its hooks (relayd.arrival.program_state), in relayctl status's words.
const SESSION = { idle: "at its prompt", working: "working", asking: "asking the person", ended: "ended", stopped: "stopped" };
const SESSION_TITLE = { asking: "its program asks its person a question: no trigger is typed into it until that is answered", stopped: "stopped by relayctl down" };

function presence(a) {
  return a.alive ? "alive" : a.archived ? "archived" : a.last_heartbeat ? "stale" : "never seen";
}

function renderAgents(agents) {
  // The heading counts what the rows say, one word for each kind of row.
  const kinds = ["alive", "stale", "archived", "never seen"];
  const counts = Object.fromEntries(kinds.map((k) => [k, agents.filter((a) => presence(a) === k).length]));
  $("agent-count").textContent = kinds.filter((k) => k === "alive" || counts[k]).map((k) => `${counts[k]} ${k}`).join(", ");
  fill($("agents").tBodies[0], agents.map((a) => {
    const kind = presence(a);
    const session = a.session ? el("div", {}, el("span", { class: "badge session " + a.session, title: SESSION_TITLE[a.session] || "what its program is doing, from its hooks", text: SESSION[a.session] || a.session })) : null;
    const work = el("td", { class: "work" }, el("div", { class: "clamp", title: [a.status, a.task].filter(Boolean).join(": ") },
      a.status ? el("span", { class: "badge", text: a.status }) : null, a.status && a.task ? " " : null, a.task ? el("span", { text: a.task }) : null));
    return el("tr", { class: "clickable", "data-agent": a.name, title: "show messages to and from " + a.name, onclick: () => showAgent(a.name) },
      el("td", { class: "who", title: a.name, text: a.name }),
      el("td", {}, el("span", { class: "badge " + kind.replace(" ", "-"), text: kind }), session),
      work,
      el("td", { class: "muted" }, el("span", { class: "clip", title: a.program || "", text: a.program || "" })),
      arrival(a),
      el("td", { class: "muted", text: ago(a.age_seconds) }),
      el("td", { class: "num", text: a.unread ?? "" }),
      el("td", { class: "num", text: a.owed ?? "—" }));
  }), "no agents registered yet (relayctl register NAME)", 8);
}

function renderReservations(list, checked) {
  const active = list.filter((r) => !r.expired);
  $("res-count").textContent = `${active.length} active` + (checked ? "" : " (too many to check for conflicts)");
  fill($("reservations").tBodies[0], list.map((r) => {
    const conflicts = r.conflicts || [];
    return el("tr", {},
      el("td", {}, el("code", { text: r.pattern }), conflicts.length ? el("span", { class: "badge conflict", title: "overlaps " + conflicts.join(", "), text: "conflict: " + conflicts.join(", ") }) : null),
      el("td", {}, el("span", { class: "who", text: r.agent }), r.handed ? el("span", { class: "badge handed", title: r.reason, text: r.handed }) : null),
      el("td", {}, el("span", { class: "badge", text: r.exclusive ? "exclusive" : "shared" })),
      el("td", { class: r.expired ? "error" : "muted", text: until(r.expires_at) }),
      el("td", { class: "muted", title: r.repo, text: r.repo.split("/").filter(Boolean).pop() || r.repo }));
  }), "nobody holds any files", 5);
}

function renderCommands(list) {
  $("cmd-count").textContent = String(list.length);
  fill($("commands").tBodies[0], list.map((c) => el("tr", {},
    el("td", {}, el("code", { text: (c.command + " " + (c.args || "")).trim() })),
    el("td", { text: c.from }),
    el("td", { class: "muted", text: c.target_session }),
    el("td", { class: "muted", text: ago((Date.now() - Date.parse(c.ts)) / 1000) }))), "none", 4);
}

function renderDeadLetters(list, rotated) {
  $("dlq-count").textContent = String(list.length) + (rotated.length ? ` (+${rotated.length} rotated inbox files, see relayctl dlq list)` : "");
  fill($("dead-letters").tBodies[0], list.map((d) => el("tr", { "data-dead": d.id },
    el("td", {}, el("span", { class: "who", text: d.from + ": " }), el("span", { text: d.subject }), " ", el("span", { class: "muted", text: shown(d.dead_at) })),
    el("td", { class: "who", text: d.to }),
    el("td", { class: "num", text: d.attempts }),
    el("td", { class: "muted", text: d.reason || "" }),
    el("td", {},
      el("button", { type: "button", class: "small retry", title: "deliver it again, with the full number of retries", onclick: () => deadLetter("retry", d) , text: "Retry" }), " ",
      el("button", { type: "button", class: "small drop", title: "delete it for good", onclick: () => deadLetter("drop", d), text: "Drop" })))),
  "none", 5);
}

function renderOwed(list, counts) {
  const total = counts.reduce((sum, a) => sum + (a.owed || 0), 0);
  $("owed-count").textContent = String(total) + (total > list.length ? ` (the ${list.length} due soonest)` : "");
  fill($("owed").tBodies[0], list.map((o) => el("tr", { "data-owed": o.id, "data-to": o.to },
    el("td", {}, el("span", { class: "who", text: o.from + ": " }), el("span", { text: o.subject })),
    el("td", { class: "who", text: o.to }),
    el("td", { class: "num", title: "this delivery, of the most it gets before it is a dead letter", text: `${o.attempt} of ${o.of}` }),
    el("td", { class: "muted", title: "when it is delivered again, or dead-lettered after the last", text: shown(o.due) }))),
  "none", 4);
}

async function post(path, request) {
  const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Relay-Token": TOKEN }, body: JSON.stringify(request) });
  return [response.ok, await response.json()];
}

async function deadLetter(action, d) {
  if (action === "drop" && !window.confirm(`Delete the dead letter "${d.subject}" for good?`)) return;
  const [ok, answer] = await post("/api/dlq/" + action, { id: d.id, to: d.to });
  $("dlq-count").textContent = ok ? `${action === "retry" ? "retried" : "dropped"} ${d.id}` : answer.error;
}

function messageItem(m) {
  const badges = [];
  if (m.priority && m.priority !== "normal") badges.push(el("span", { class: "badge p-" + m.priority, text: m.priority }));
  if (m.ack) badges.push(el("span", { class: "badge ack", title: `sent with --ack: redelivered until acknowledged; delivered ${m.deliveries || 1} time(s)`, text: (m.deliveries || 1) > 1 ? `ack · ${m.deliveries} deliveries` : "ack" }));
  if (m.type) badges.push(el("span", { class: "badge type", text: m.type }));
  if (m.thread) badges.push(el("span", { class: "badge thread", title: "show this thread", text: "thread " + m.thread, onclick: () => showThread(m.thread) }));
  for (const tag of m.tags || []) badges.push(el("span", { class: "badge", text: "#" + tag }));
  const dead = (state && state.dead_letters || []).some((d) => d.id === m.id && d.to === m.to);
  if (dead) badges.push(el("span", { class: "badge dead", title: "this copy is a dead letter: out of attempts, never acknowledged (see Dead letters)", text: "dead letter" }));
  const head = el("div", { class: "head" },
    el("span", { class: "who", text: `${m.from} → ${m.to}` }),
    ...badges,
    el("span", { class: "subject", text: m.subject }),
    el("span", { class: "muted when", title: m.ts + "  " + m.id, text: shown(m.ts) }));
  head.append(el("span", { class: "badge way", title: "stored, announced, read, acknowledged: per recipient", text: "way", onclick: () => showWay(item, m.id) }));
  const item = el("li", { "data-id": m.id }, head);
  if (m.body && m.body !== m.subject) item.append(el("pre", { class: "body", text: m.body }));
  if (m.clipped) item.append(el("div", { class: "muted", text: `(clipped: ${m.clipped} characters; relayctl read shows it whole)` }));
  if (shownWays.has(m.id)) item.append(wayList(shownWays.get(m.id)));
  return item;
}

function wayText(w) {
  const steps = ["stored " + w.stored];
  const told = w.announced;
  if (!told) steps.push(`not announced yet (${w.mechanism})`);
  else if (told.ok) steps.push(`announced by ${told.how} ${told.at}` + (told.note ? ` (${told.note})` : ""));
  else steps.push(`announcing by ${told.how} failed ${told.at}: ${told.error}`);
  if (w.door && w.door.length) steps.push("Claude Code: " + w.door.map((d) => `${DOOR_WORDS[d.status] || d.status} ${d.at}` + (d.detail ? ` (${d.detail})` : "")).join(", "));
  if (w.bounced) steps.push("bounced to the sender");
  steps.push(w.read ? (w.read_at ? "read " + w.read_at : "read") : "unread");
  if (w.ack) steps.push({ acked: "acknowledged " + (w.acked_at || ""), owed: "not acknowledged", dead_letter: "dead letter" }[w.ack]);
  return `${w.to}: ${steps.join(", ")}`;
}

const shownWays = new Map(); // message id -> the lines of its way, kept across re-renders

function wayList(lines) {
  return el("ul", { class: "way" }, ...lines.map((text) => el("li", { text })));
}

async function showWay(item, id) {
  const response = await fetch("/api/track?" + new URLSearchParams({ id }), { headers: { "X-Relay-Token": TOKEN } });
  const answer = await response.json();
  shownWays.set(id, response.ok ? answer.recipients.map(wayText) : [answer.error]);
  const shown = document.querySelector(`#messages li[data-id="${CSS.escape(id)}"]`) || item;
  const old = shown.querySelector("ul.way");
  if (old) old.remove();
  shown.append(wayList(shownWays.get(id)));
}

// One row for each copy of a message: an --ack redelivery is another line of the same id in
// the recipient's inbox, counted as a delivery of the row (newest first in, the newest line kept).
function oneRowEach(list) {
  const rows = new Map();
  for (const m of list) {
    const key = m.id + "\u0000" + m.to;
    const row = rows.get(key);
    if (row) {
      row.lines += 1;
      row.deliveries = Math.max(row.deliveries, m.attempt || 1, row.lines);
    } else rows.set(key, { ...m, lines: 1, deliveries: m.attempt || 1 });
  }
  return [...rows.values()];
}

function renderMessages(list, title, chronological) {
  $("view-title").textContent = title;
  const shown = oneRowEach(chronological ? [...list].reverse() : list);
  const items = shown.map(messageItem);
  $("messages").replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: filter ? "no messages match" : "no messages yet" })]));
}

function renderCompose(s) {
  $("human").textContent = s.human;
  const select = $("c-to");
  const chosen = select.value;
  // No recipient is chosen for the person: the empty first option keeps the form from sending until one is.
  const options = [el("option", { value: "", text: "choose…" }), el("option", { value: "*", text: "everyone (broadcast)" })];
  for (const a of s.agents) if (a.name !== s.human) options.push(el("option", { value: a.name, text: a.name }));
  select.replaceChildren(...options);
  select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
}

function render() {
  if (!state) return;
  if (state.error) {
    $("live").textContent = state.error;
    $("live").className = "badge off";
    return;
  }
  $("store").textContent = state.store;
  $("live").textContent = "live · " + (state.source === "daemon" ? "relayd events" : state.source === "inotify" ? "store files (relayd down)" : "waiting for the store");
  $("live").className = "badge on";
  renderAgents(state.agents);
  renderPaused(state.paused || []);
  renderReservations(state.reservations, state.conflicts_checked);
  renderCommands(state.commands);
  renderDeadLetters(state.dead_letters || [], state.rotated_files || []);
  renderOwed(state.owed || [], state.agents);
  renderCompose(state);
  if (filter) scheduleSearch(250);
  else renderMessages(state.messages, "Messages (newest first)", false);
}

function describe(f) {
  if (f.thread && Object.keys(f).length === 1) return "Thread " + f.thread + " (oldest first)";
  if (f.agent && Object.keys(f).length === 1) return "Messages to and from " + f.agent;
  return "Search: " + Object.entries(f).map(([k, v]) => (k === "text" ? `“${v}”` : `${k} ${v}`)).join(", ");
}

async function runSearch() {
  if (!filter) return;
  const asked = filter;
  const response = await fetch("/api/search?" + new URLSearchParams({ ...asked, limit: 200 }), { headers: { "X-Relay-Token": TOKEN } });
  const answer = await response.json();
  if (asked !== filter) return; // a newer search started meanwhile
  if (!response.ok) {
    $("view-title").textContent = "Search failed: " + answer.error;
    $("messages").replaceChildren();
    return;
  }
  renderMessages(answer.messages, describe(asked) + (answer.more ? " — newest 200" : ""), Boolean(asked.thread && Object.keys(asked).length === 1));
}

function scheduleSearch(delay) {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, delay);
}

function setFilter(f) {
  const clean = Object.fromEntries(Object.entries(f).filter(([, v]) => v && String(v).trim()));
  filter = Object.keys(clean).length ? clean : null;
  if (filter) scheduleSearch(0);
  else render();
}

function showThread(thread) {
  for (const id of ["q-text", "q-from", "q-to", "q-since"]) $(id).value = "";
  $("q-thread").value = thread;
  setFilter({ thread });
}

function showAgent(agent) {
  for (const id of ["q-text", "q-from", "q-to", "q-thread", "q-since"]) $(id).value = "";
  setFilter({ agent });
}

$("search").addEventListener("submit", (event) => {
  event.preventDefault();
  setFilter({ text: $("q-text").value, from: $("q-from").value, to: $("q-to").value, thread: $("q-thread").value, since: $("q-since").value });
});
$("q-clear").addEventListener("click", () => {
  $("search").reset();
  setFilter({});
});

$("compose").addEventListener("submit", async (event) => {
  event.preventDefault();
  const to = $("c-to").value;
  const request = { body: $("c-body").value, priority: $("c-priority").value };
  if (to === "*") request.broadcast = true;
  else request.to = [to];
  if ($("c-thread").value.trim()) request.thread = $("c-thread").value.trim();
  $("c-send").disabled = true;
  try {
    const [ok, answer] = await post("/api/send", request);
    if (!ok) {
      $("c-result").textContent = answer.error;
      $("c-result").className = "error";
      return;
    }
    $("c-result").textContent = "sent to " + answer.sent.map((m) => m.to).join(", ") + (answer.notify_failed.length ? " (notifying failed: " + answer.notify_failed.map((n) => n.agent).join(", ") + ")" : "");
    $("c-result").className = "muted";
    $("c-body").value = "";
  } catch (error) {
    $("c-result").textContent = "not sent: " + error;
    $("c-result").className = "error";
  } finally {
    $("c-send").disabled = false;
  }
});

function forbidden() {
  $("live").textContent = "forbidden: open the URL that 'relayctl web' printed (it carries the access token)";
  $("live").className = "badge off";
}

// The state stream (Server-Sent Events), read with fetch so that the token goes in a header.
async function connect() {
  if (!TOKEN) return forbidden();
  for (;;) {
    try {
      const response = await fetch("/api/events", { headers: { "X-Relay-Token": TOKEN }, cache: "no-store" });
      if (response.status === 403) return forbidden();
      if (!response.ok) throw new Error("HTTP " + response.status);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end).split("\n");
          buffer = buffer.slice(end + 2);
          const data = frame.filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).join("\n");
          if (frame.includes("event: state") && data) {
            state = JSON.parse(data);
            render();
          }
        }
      }
    } catch (error) {
      // dropped (the server stopped, or found this reader too slow): try again below
    }
    $("live").textContent = "disconnected — reconnecting…";
    $("live").className = "badge off";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

setInterval(() => { // ages and expiries move on between states
  if (state && !state.error) {
    renderReservations(state.reservations, state.conflicts_checked);
    renderCommands(state.commands);
  }
}, 30000);

connect();
