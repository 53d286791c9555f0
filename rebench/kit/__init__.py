"""The environment kit: trusted code that every environment's scorer and build imports.

It ships whole, next to the scoring helper, in the sandbox's protected harness folder
(`/opt/rebench/rebench/kit/` in Docker images, `ROOT/rebench/rebench/kit/` for the local
backend; root-owned, read-only to the agent), so that a scorer runs the harness's copy,
never one the agent could have changed. Environments import it as `rebench.kit`; their
folders hold only what the agent is given (see environments/_common/agent_copies.py).

Scoring time (stdlib only, like the helper): `confined` (running the agent's code in a
confined child and talking to it), `proctree` (CPU time of the agent's whole process tree and
the SIGCHLD guard, for timing scores) and `context` (`python score.py` run by hand).
Build time and models (NumPy; PyTorch where the environment has it): `buildutil`, `completion`
(what a local model served by the gateway returns),
`corpus`, `owt`, `gpt`, `lmtrain`, `torch_rule_enforcer`, `torch_scoring` (scorers of models).

Nothing here imports from the rest of rebench: in a sandbox this package is all there is.
"""
