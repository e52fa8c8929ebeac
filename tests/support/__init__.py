"""What the tests share: real processes (relayd, relayctl, nats-server, tmux, the agent
programs from npm and their scripted model servers), raw protocol clients, waiting without
guessing, and the scripts some tests run by path. Tests import it as `support` (tests/ is on
sys.path through tests/conftest.py); benchmarks/ does too. No test file imports another."""
