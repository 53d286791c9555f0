"""Scripts that run inside a human attempt's container (stdlib only, run by /usr/bin/python3 -I):
`gate.py` (root: sshd per connection and the session recorder), `session.py` (sshd's
ForceCommand, as the agent: hands the session to the recorder) and `task.py` (the `task`
command). `rebench.sandbox.docker.ssh.open_ssh` copies them in; nothing here is imported."""
