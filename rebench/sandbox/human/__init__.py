"""Scripts that run inside a human attempt's container (stdlib only, run by /usr/bin/python3 -I):
`gate.py` (root: sshd per connection, and each session's process) with `relay.py` beside it (the
session relayed and recorded), `session.py` (sshd's ForceCommand, as the agent: hands the session
to the gate) and `task.py` (the `task` command). `rebench.sandbox.docker.ssh.open_ssh` copies them
in; the harness imports none of them."""
