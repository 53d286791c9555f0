"""`--network full` on Docker: a bridge network of the attempt's own, with the host closed to it.

A container on Docker's bridge reaches the outside world, but also every service of the host
(through the bridge's gateway address or any other address of the host: the engine's API if it
listens on TCP, a human attempt's SSH relay bound to all addresses, whatever else runs there),
the containers of other attempts on the same bridge, and link-local addresses (a cloud's
instance metadata service, with its credentials). So each `full` attempt gets:

- its own network (bridge interface `rbn-XXXXXXXX`), so no other attempt shares its segment;
- host firewall rules, tagged with the network's name, that reject what comes in from that
  interface: everything addressed to the host itself (INPUT), and in FORWARD whatever goes to
  another attempt's bridge, to a link-local address, or through a destination NAT (a port
  another container published on the host);
- while a score call runs, one more FORWARD rule that rejects everything from the interface, so
  the submitted code cannot carry what the scorer shows it (hidden rows, hidden problems) out
  to a server the agent reads later;
- no IPv6 in the container (a link-local address would reach the host past the IPv4 rules).

The rules are iptables rules on the engine's host, so the harness must run there as root (it
already must, to freeze the agent's cgroup). `check_network` says so before a run starts.
What stays reachable and what is not covered is in docs/security.md ("The network").
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import docker.errors

from rebench.errors import RebenchError, SandboxError, SandboxStartError
from rebench.network import NetworkPolicy

BRIDGE_PREFIX = "rbn-"
"""Bridge interfaces of attempt networks: `rbn-` and 8 hex digits (interface names hold 15 bytes)."""
RULE_TAG = "rebench-net:"
"""Comment on each host rule of an attempt network, followed by the network's name (for removal and gc)."""
SCORING_TAG = "rebench-score:"
"""Comment on the rule that closes an attempt network while a score call runs."""
NETWORK_LABEL = "rebench.network"
"""Label on attempt networks (value: the bridge interface), by which gc finds them."""
_REJECT = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]
_IPTABLES_TIMEOUT_S = 30.0
_REMOVE_TRIES = 40


def _iptables(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=_IPTABLES_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return subprocess.CompletedProcess(["iptables", *args], 127, "", str(exc))


def firewall_problem() -> str | None:
    """Why this process cannot set the host's iptables rules, or None when it can."""
    for chain in ("INPUT", "FORWARD"):
        done = _iptables(["-S", chain])
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            return f"`iptables -S {chain}` failed ({said[-1] if said else f'exit {done.returncode}'})"
    return None


def check_network(policy: NetworkPolicy) -> None:
    """The docker backend's preflight (SandboxBackend.check_network): `full` needs the host's firewall."""
    if policy != NetworkPolicy.FULL:
        return
    problem = firewall_problem()
    if problem:
        raise RebenchError(f"--network full needs iptables on the Docker engine's host, run as root, to keep the "
                           f"host and other attempts out of the attempt's reach: {problem}")


def _host_rules(bridge: str, tag: str) -> list[tuple[str, list[str]]]:
    """(chain, rule) pairs that close the host, other attempts and link-local addresses to `bridge`."""
    comment = ["-m", "comment", "--comment", tag]
    return [
        ("INPUT", ["-i", bridge, *comment, *_REJECT]),
        ("FORWARD", ["-i", bridge, "-o", f"{BRIDGE_PREFIX}+", *comment, *_REJECT]),
        ("FORWARD", ["-i", bridge, "-d", "169.254.0.0/16", *comment, *_REJECT]),
        ("FORWARD", ["-i", bridge, "-m", "conntrack", "--ctstate", "DNAT", *comment, *_REJECT]),
    ]


class AttemptNetwork:
    """One `full` attempt's network and its host rules; `remove` undoes both (never raises)."""

    def __init__(self, client: Any, name: str, bridge: str) -> None:
        self.client = client
        self.name = name
        self.bridge = bridge
        self.closed_for_scoring = False

    @classmethod
    def create(cls, client: Any, attempt_id: int, labels: dict[str, str]) -> AttemptNetwork:
        """Make the network and close the host to it; SandboxStartError (nothing left) if either fails."""
        suffix = os.urandom(4).hex()
        network = cls(client, f"rebench-a{attempt_id}-{suffix}", f"{BRIDGE_PREFIX}{suffix}")
        try:
            client.networks.create(
                network.name, driver="bridge", check_duplicate=True, labels={**labels, NETWORK_LABEL: network.bridge},
                options={"com.docker.network.bridge.name": network.bridge,
                         "com.docker.network.bridge.enable_icc": "false"},
            )
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"attempt {attempt_id}: cannot create its network: {exc}") from None
        try:
            if not Path("/sys/class/net", network.bridge).exists():
                raise SandboxStartError(
                    f"attempt {attempt_id}: its network's bridge {network.bridge} is not on this host: --network "
                    "full needs the harness on the Docker engine's host, to set the host's firewall")
            for chain, rule in _host_rules(network.bridge, RULE_TAG + network.name):
                network._insert(chain, rule)
        except BaseException:
            network.remove()
            raise
        return network

    def _insert(self, chain: str, rule: list[str]) -> None:
        done = _iptables(["-I", chain, "1", *rule])
        if done.returncode != 0:
            raise SandboxStartError(f"cannot close the host to network {self.name}: iptables -I {chain}: "
                                    f"{(done.stderr or done.stdout).strip()}")

    def close_for_scoring(self) -> None:
        """Reject everything the container sends out until `open_after_scoring` (SandboxError if not)."""
        if self.closed_for_scoring:
            return
        done = _iptables(["-I", "FORWARD", "1", *self._scoring_rule()])
        if done.returncode != 0:
            raise SandboxError(f"cannot close network {self.name} for scoring: {(done.stderr or done.stdout).strip()}")
        self.closed_for_scoring = True

    def open_after_scoring(self) -> None:
        if self.closed_for_scoring:
            _iptables(["-D", "FORWARD", *self._scoring_rule()])
            self.closed_for_scoring = False

    def _scoring_rule(self) -> list[str]:
        return ["-i", self.bridge, "-m", "comment", "--comment", SCORING_TAG + self.name, *_REJECT]

    def remove(self) -> None:
        """Remove the network and then every host rule tagged with its name. Its container may still
        be going (the engine's auto-removal): a few tries; if it stays, the network and its rules
        stay too (the host kept closed) until `rebench gc`."""
        for _ in range(_REMOVE_TRIES):
            try:
                self.client.networks.get(self.name).remove()
            except docker.errors.NotFound:
                break
            except docker.errors.DockerException:
                time.sleep(0.25)
                continue
            break
        else:
            return
        remove_rules(lambda name: name == self.name)
        self.closed_for_scoring = False


def remove_rules(doomed: Callable[[str], bool]) -> list[str]:
    """Delete the host rules of the attempt networks whose name `doomed` accepts; their names."""
    removed: set[str] = set()
    for chain in ("INPUT", "FORWARD"):
        listing = _iptables(["-S", chain])
        if listing.returncode != 0:
            continue
        for line in listing.stdout.splitlines():
            words = shlex.split(line)
            if len(words) < 2 or words[0] != "-A" or "--comment" not in words:
                continue
            comment = words[words.index("--comment") + 1]
            for tag in (RULE_TAG, SCORING_TAG):
                if comment.startswith(tag) and doomed(comment[len(tag):]):
                    _iptables(["-D", *words[1:]])
                    removed.add(comment[len(tag):])
    return sorted(removed)


def sweep_networks(client: Any, keep: Callable[[dict[str, str]], bool]) -> list[str]:
    """`rebench gc`: remove attempt networks that `keep` (given their labels) does not keep and that
    no container uses, and every host rule of a network that no longer exists. Names removed."""
    removed = []
    for network in client.networks.list(filters={"label": NETWORK_LABEL}):
        if keep(dict(network.attrs.get("Labels") or {})):
            continue
        try:
            network.remove()
        except docker.errors.DockerException:
            continue  # a container still uses it
        removed.append(network.name)

    def gone(name: str) -> bool:  # asked rule by rule: a network made since the listing keeps its rules
        try:
            client.networks.get(name)
        except docker.errors.NotFound:
            return True
        except docker.errors.DockerException:
            return False
        return False

    remove_rules(gone)
    return removed
