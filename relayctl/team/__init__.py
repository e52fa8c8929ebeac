"""One command brings a team up: `relayctl up [relay-team.toml]`, and `relayctl down`.

Data flows in one direction:

  teamfile.load(path)         the team file (TOML, schema in docs/team.md) -> Team
  clients.launch(agent, ...)  per agent: its client configuration written (MCP config,
                              hooks) and the command line its pane runs
  tmux.TmuxTeam / zellij      one pane per agent in a session named after the team;
                              each pane registered as its agent's notify target
  up.bring_up / up.take_down  the steps in order: store, agents, relayd, guard, panes,
                              start-up prompts; and the way back down

`relayctl up --preset overlord|ignite` only writes a team file (teamfile.preset_text).
"""
