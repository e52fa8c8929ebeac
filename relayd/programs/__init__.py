"""The programs wing: everything relay knows about each agent program it works with.

One module per program (`claude`, `codex`, `gemini`, `opencode`, `copilot`), each defining
one `PROGRAM` (a `relayd.programs.program.Program`): its hook events and the session state
each implies, the answer shape it reads, its project settings files and relay's entries in
them, its MCP configuration, its launch line, its folder trust record, what its screen shows
(its prompt, its questions, its first-start dialogs), the versions tested and the notes that
explain its quirks. `relayd.programs.registry` lists them; the hook answerer, the state
machine, `hooks install`/`uninstall`, `mcp-config`, `up`, `uninstall` and the screen check
loop over it. A sixth program is one new module here, one line in the registry, and its test.

Modules, lowest first: `program` (the shape of a Program; imports nothing), the five
programs (each imports only `program`), `registry`.

Its rule: nothing here imports anything beyond the standard library's cheapest modules
(os) and this wing, because `relayctl hook` loads the registry at every event of every
session (relayctl.fast).
"""
