"""Human expert attempts over SSH (agent `human`).

An operator runs `rebench human start`; a supervisor process (rebench.human.supervisor) starts
the attempt's keep-alive Docker sandbox through the AttemptRunner like any agent attempt
(install, baseline score), opens the SSH gate and relays connections to it, and serves the
expert's `task` commands (rebench.human.tasks) until the working-time budget is spent, the
expert submits or the operator stops it. The attempt's clock is wall time counted from
`HumanSession.clock_origin` with its pauses in the database (rebench.human.clock), so a new
supervisor (`rebench human attach`) carries on where a dead one stopped.
"""
