"""What an attempt's container is made of: its mounts, the exec server it starts with, and the
engine call that creates it (rebench.sandbox.docker.sandbox starts and runs it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import docker.errors
from docker.types import DeviceRequest, LogConfig

from rebench.errors import SandboxStartError
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.docker.disk import LABEL_DISK, AgentDisk
from rebench.sandbox.docker.engine import (
    LABEL_ATTEMPT,
    LABEL_CAMPAIGN,
    LABEL_HUMAN,
    LABEL_OWNER,
    DockerEngine,
    owner_token,
)
from rebench.sandbox.docker.network import AttemptNetwork

SERVER_SOURCE = (Path(__file__).parents[1] / "exec_server.py").read_bytes()
FORWARDER_SOURCE = (Path(__file__).with_name("forwarder.py")).read_bytes()
LOADER = (
    "import sys;b=sys.stdin.buffer;n=int(b.readline());"
    "exec(compile(b.read(n),'rebench-exec-server','exec'),{'__name__':'__main__'})"
)
HARNESS_PROCESSES = 256
"""Processes (threads count) the container may hold beyond the agent's own limit: the harness's
commands (scoring with its worker threads, snapshots, kills) run outside the agent's cgroup and
still start while a fork bomb of the agent fills that cgroup."""
GATE_MOUNT = "/run/rebench/gate"
"""Where a keep-alive container sees its gate folder (its parent is made root-only inside)."""
HARNESS_SOCKET = "harness.sock"
SOCKET_PATH_MAX = 100
"""Unix socket paths must fit sockaddr_un (108 bytes on Linux); a little margin."""
CONNECT_S = 15.0
"""How long a keep-alive container's exec server may take to open its socket."""
GATEWAY_MOUNT = "/run/rebench/gateway"
"""Where the container sees the folder of the model gateway's socket (SandboxSpec.gateway_socket);
/run/rebench is made root-only before anything of the agent runs."""
AGENT_GATEWAY_MOUNT = "/run/rebench/agent-gateway"
"""Where the container sees the folder of an installed agent's own gateway socket
(SandboxSpec.agent_gateway_socket), beside the environment's."""
FORWARDER_START = """
set -eu
chown root:root /run/rebench && chmod 0700 /run/rebench
cat > /run/rebench/gateway-forwarder.py
rm -f /run/rebench/gateway-forwarder-"$1".ready
env -u REBENCH_EXEC_ID setsid -f /usr/bin/python3 -I /run/rebench/gateway-forwarder.py "$1" \
  "$2" /run/rebench/gateway-forwarder-"$1".ready </dev/null >/dev/null 2>>/run/rebench/gateway-forwarder.log
for _ in $(seq 200); do [ -s /run/rebench/gateway-forwarder-"$1".ready ] && exit 0; sleep 0.05; done
echo "the gateway forwarder did not start"; tail -5 /run/rebench/gateway-forwarder.log; exit 1
"""



def container_labels(spec: SandboxSpec, disk: AgentDisk | None = None) -> dict[str, str]:
    return {
        **({LABEL_DISK: str(disk.folder)} if disk is not None else {}),
        LABEL_ATTEMPT: str(spec.attempt_id),
        LABEL_CAMPAIGN: "" if spec.campaign_id is None else str(spec.campaign_id),
        "rebench.environment": spec.environment,
        "rebench.profile": spec.profile,
        LABEL_OWNER: owner_token(),
        **({LABEL_HUMAN: str(spec.attempt_id)} if spec.keep_alive else {}),
    }


def create_container(engine: DockerEngine, spec: SandboxSpec, *, gate_dir: Path | None,
                     network: AttemptNetwork | None, shm_bytes: int, disk: AgentDisk | None = None) -> Any:
    """Create (not start) the attempt's container; a keep-alive one gets the exec server in its
    gate folder, listening there, so that a later harness can reconnect."""
    client = engine.client
    devices = []
    if spec.gpus:
        devices = [
            DeviceRequest(driver="nvidia", device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]])
        ]
    memory = int(spec.memory_gb * 1024**3)
    name = f"rebench-a{spec.attempt_id}-{os.urandom(3).hex()}"
    keep = spec.keep_alive
    command = ["python3", "-I", "-S", "-c", LOADER]  # -S: the server needs no site-packages (faster start)
    binds: dict[str, dict[str, str]] = disk.binds() if disk is not None else {}
    if keep:
        if gate_dir is None:  # DockerSandbox refuses such a spec first; this keeps the type honest
            raise SandboxStartError(f"a keep-alive sandbox (attempt {spec.attempt_id}) needs a gate_dir")
        gate = gate_dir
        # The server runs from the gate folder and listens there, so a later harness can reconnect.
        (gate / "exec_server.py").write_bytes(SERVER_SOURCE)
        (gate / HARNESS_SOCKET).unlink(missing_ok=True)
        binds[str(gate.resolve())] = {"bind": GATE_MOUNT, "mode": "rw"}
        # Through sh only for the redirection: whatever stops python early is in the log too.
        command = ["sh", "-c", f"exec python3 -I -S {GATE_MOUNT}/exec_server.py --listen "
                   f"{GATE_MOUNT}/{HARNESS_SOCKET} --attempt {spec.attempt_id} 2>>{GATE_MOUNT}/exec-server.log"]
    if spec.gateway_socket:
        # Read-only: root inside connects to the socket (which works through a read-only bind
        # mount) and never needs to create anything in a host folder.
        binds[str(Path(spec.gateway_socket).parent.resolve())] = {"bind": GATEWAY_MOUNT, "mode": "ro"}
    if spec.agent_gateway_socket:
        binds[str(Path(spec.agent_gateway_socket).parent.resolve())] = {"bind": AGENT_GATEWAY_MOUNT, "mode": "ro"}
    host_config = client.api.create_host_config(
        auto_remove=not keep,
        binds=binds or None,
        network_mode=network.name if network else "none",
        # IPv6 off: a link-local address would reach the host past the host's IPv4 rules
        sysctls={"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
        if network else None,
        nano_cpus=int(min(spec.cpus, engine.cpu_count()) * 1e9),
        mem_limit=memory,
        memswap_limit=memory,
        pids_limit=spec.max_processes + HARNESS_PROCESSES,
        shm_size=shm_bytes,
        device_requests=devices,
        # sshd (human attempts, as root) fails a pty login when it cannot write its audit record.
        cap_drop=["NET_RAW", "MKNOD"] if keep else ["NET_RAW", "MKNOD", "AUDIT_WRITE"],
        security_opt=["no-new-privileges"],
        log_config=LogConfig(type="none"),
    )
    try:
        created = client.api.create_container(
            spec.image,
            command=command,
            name=name,
            hostname=f"attempt-{spec.attempt_id}",
            user="0",
            stdin_open=not keep,
            detach=keep,  # with stdin_open: StdinOnce, so a dead harness closes the server's stdin
            tty=False,
            labels=container_labels(spec, disk),
            environment=dict(spec.env),
            working_dir="/",
            host_config=host_config,
        )
    except docker.errors.ImageNotFound:
        raise SandboxStartError(
            f"image {spec.image} not found; build it with `rebench envs build {spec.environment} "
            f"--profile {spec.profile} --backend docker`"
        ) from None
    # A model without a second inspect round trip: attach, start and get_archive need only the id.
    return client.containers.prepare_model({"Id": created["Id"]})

