"""The `docker` backend: one container per attempt, through the Docker Engine API.

This package is the only part of rebench that imports the `docker` SDK; image builds
and garbage collection go through its `DockerEngine`. One job per module:

- `engine`: the engine wrapper (images, containers, volumes; labels and owner tokens for gc);
- `archive`: tar helpers (files into a container; a bounded snapshot out of one);
- `files`: a started container's file methods (ownership by the layout below);
- `sandbox`: the sandbox itself (container lifecycle, the disk watch; keep-alive containers of
  human attempts, which outlive their harness and can be reattached), built on three layers:
  `commands` (each command a request to the exec server; scoring with the agent frozen),
  `file_ops` (files as the harness and as the agent) and `task_socket` (answering `task`);
- `container`: what the container is made of (mounts, the exec server it starts with, the
  engine call that creates it);
- `tasks`: the `task` command's requests from inside a human attempt's container;
- `ssh`: SSH into a human attempt's container (the gate inside, the relay on the host);
- `network`: `--network full`: the attempt's own bridge network, the host's firewall closed to it;
- `forwarder`: started as root in the container when the attempt has a model gateway
  (SandboxSpec.gateway_socket): 127.0.0.1:PORT inside, relayed to the harness's Unix socket
  mounted in the root-only /run/rebench/gateway (docs/gateway.md);
(`rebench.sandbox.cast`, beside this package, reads and plays the asciinema recordings of its SSH sessions.)

Layout inside the container (the RE-Bench one): user `agent` (uid 1000) owns
/home/agent; /protected is root:protected and closed to the agent; the scoring
helper is /opt/rebench/score_helper.py. Scoring runs as its own user `scorer`
(with the extra group `protected`), never as the agent's uid; the submitted code
that scoring runs is switched to a third user, `subject` (see score_helper.py).
While a score call runs, every process of the agent is frozen (exec_server.py).

Commands do not go through `docker exec` (about 50 ms each): the container's
main process is our exec server (rebench/sandbox/exec_server.py, sent over stdin
to a one-line loader so any image with python3 works), and every call is one
request on the attached stream. With StdinOnce, the stream closing (the harness
died) closes the server's stdin, the server kills everything and exits, and
AutoRemove deletes the container: a crash leaks nothing for long, and
`rebench gc` sweeps the rest.

Human attempts use keep-alive containers instead (`SandboxSpec.keep_alive`, label
LABEL_HUMAN): no AutoRemove, and the exec server listens on a Unix socket in the mounted
gate folder (/run/rebench/gate, in a root-only /run/rebench), so the container outlives its
harness and a new one reattaches; only an explicit stop() removes it.
"""

from rebench.network import NetworkPolicy
from rebench.sandbox.base import SandboxBackend
from rebench.sandbox.docker.engine import (
    LABEL_ATTEMPT,
    LABEL_CAMPAIGN,
    LABEL_HUMAN,
    LABEL_OWNER,
    DockerEngine,
    engine_available,
    owner_alive,
    owner_token,
)
from rebench.sandbox.docker.network import check_network
from rebench.sandbox.docker.sandbox import DockerSandbox, create_sandbox

BACKEND = SandboxBackend(create=create_sandbox, available=engine_available, networks=frozenset(NetworkPolicy),
                         check_network=check_network)
"""What the `docker` entry point of group `rebench.sandboxes` names."""

__all__ = [
    "BACKEND",
    "LABEL_ATTEMPT",
    "LABEL_CAMPAIGN",
    "LABEL_HUMAN",
    "LABEL_OWNER",
    "DockerEngine",
    "DockerSandbox",
    "create_sandbox",
    "engine_available",
    "owner_alive",
    "owner_token",
]
