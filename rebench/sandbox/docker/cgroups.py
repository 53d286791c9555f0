"""The agent's own cgroup inside a container, driven from the host.

Freezing with signals can be undone by the frozen process (a POSIX timer that sends SIGCONT
is delivered to a stopped process and wakes it), so the Docker backend freezes the agent with
the kernel's cgroup freezer instead: every agent process lives in a child cgroup `agent` of
the container's cgroup, created here, and only the host writes its freezer (cgroup v1
`freezer.state`, v2 `cgroup.freeze`): the container sees its cgroup file system read-only.
The same cgroup carries the agent's process limit (`pids.max`), below the container's own,
so a fork bomb of the agent leaves room for the harness's commands (scoring, snapshots,
kills), which run beside it in the container's cgroup.

Processes are put into the cgroup once: the exec server forks a spawner at start, the host
moves it here, and every agent command is forked by the spawner and inherits the cgroup.
This module needs write access to the host's cgroup file system (the harness runs as root).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rebench.errors import SandboxError

AGENT_CGROUP = "agent"
FREEZE_WAIT_S = 10.0
"""How long the kernel may take to report the agent's cgroup frozen before the score call fails."""


class CgroupError(SandboxError):
    """The agent's cgroup could not be set up, frozen, thawed or read."""


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, fs type, super options) of every cgroup mount this process sees."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return found


def host_freezer() -> str | None:
    """The freezer this host offers the agent's cgroup ("cgroup v1 freezer" or "cgroup v2"), or None:
    what `AgentCgroup.of_process` will look for when a container starts (`rebench doctor` asks early)."""
    mounts = _mounts()
    if any(kind == "cgroup" and "freezer" in options for _, _, kind, options in mounts):
        return "cgroup v1 freezer"
    for _, point, kind, _ in mounts:  # v2 freezes from Linux 5.2: every non-root cgroup has cgroup.freeze
        if kind == "cgroup2" and any(Path(point).glob("*/cgroup.freeze")):
            return "cgroup v2"
    return None


def _host_folder(mount_root: str, mount_point: str, path: str) -> Path:
    if mount_root != "/" and not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
        raise CgroupError(f"cgroup {path} is not below this host's cgroup mount {mount_point} (root {mount_root})")
    return Path(mount_point) / path[len(mount_root.rstrip("/")) :].lstrip("/")


@dataclass
class AgentCgroup:
    """`container` folders (one per hierarchy used: v1 freezer and pids, or the v2 one) and their `agent` child."""

    version: int
    freezer: Path
    """The container's cgroup folder in the hierarchy that freezes (v1 freezer, or v2)."""
    pids: Path | None
    """The container's cgroup folder in the hierarchy that counts processes (None: no pids controller)."""
    made: list[Path] = field(default_factory=list)

    @property
    def agent_folders(self) -> list[Path]:
        folders = [self.freezer / AGENT_CGROUP]
        if self.pids is not None and self.pids != self.freezer:
            folders.append(self.pids / AGENT_CGROUP)
        return folders

    # -- set up ----------------------------------------------------------------
    @classmethod
    def of_process(cls, host_pid: int) -> AgentCgroup:
        """The container cgroups of the process `host_pid` (the container's first process)."""
        try:
            lines = Path(f"/proc/{host_pid}/cgroup").read_text().splitlines()
        except OSError as exc:
            raise CgroupError(f"cannot read the cgroups of the container's process {host_pid}: {exc}") from None
        by_controller: dict[str, str] = {}
        unified = None
        for line in lines:
            number, controllers, path = line.split(":", 2)
            if number == "0" and not controllers:
                unified = path
            for name in controllers.split(","):
                if name:
                    by_controller[name] = path
        mounts = _mounts()

        def v1_folder(controller: str) -> Path | None:
            for root, point, kind, options in mounts:
                if kind == "cgroup" and controller in options and controller in by_controller:
                    return _host_folder(root, point, by_controller[controller])
            return None

        freezer = v1_folder("freezer")
        if freezer is not None:
            return cls(version=1, freezer=freezer, pids=v1_folder("pids"))
        for root, point, kind, _ in mounts:
            if kind == "cgroup2" and unified is not None:
                folder = _host_folder(root, point, unified)
                if (folder / "cgroup.freeze").exists() or (folder / "cgroup.procs").exists():
                    return cls(version=2, freezer=folder, pids=folder)
        raise CgroupError("this host has no cgroup freezer (neither a v1 freezer hierarchy nor cgroup v2)")

    def create(self, agent_pids_max: int) -> None:
        """Make the `agent` child cgroups and cap its processes at `agent_pids_max`."""
        try:
            if self.version == 2:
                self._split_v2()
            for folder in self.agent_folders:
                folder.mkdir(exist_ok=True)
                self.made.append(folder)
            if self.pids is not None and (self.pids / AGENT_CGROUP / "pids.max").exists():
                (self.pids / AGENT_CGROUP / "pids.max").write_text(str(agent_pids_max))
        except OSError as exc:
            raise CgroupError(
                f"cannot set up the agent's cgroup in {self.freezer}: {exc} (the docker backend freezes the agent "
                "with the cgroup freezer and needs write access to the host's cgroups: run the harness as root)"
            ) from None

    def _split_v2(self) -> None:
        """v2 allows processes only in leaves once a controller is delegated: the container's own
        processes move to a `harness` child, then `pids` is enabled for the children."""
        harness = self.freezer / "harness"
        harness.mkdir(exist_ok=True)
        self.made.append(harness)
        for _ in range(10):
            pids = self._read_procs(self.freezer)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, OSError):
                    (harness / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):  # without a pids controller the agent keeps the container's limit
            (self.freezer / "cgroup.subtree_control").write_text("+pids")

    # -- members -----------------------------------------------------------------
    @staticmethod
    def _read_procs(folder: Path) -> list[int]:
        try:
            return [int(x) for x in (folder / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def agent_pids(self) -> list[int]:
        """Host pids of every process in the agent's cgroup (and any child cgroup of it)."""
        found: list[int] = []
        for folder, _, _ in os.walk(self.freezer / AGENT_CGROUP):
            found.extend(self._read_procs(Path(folder)))
        return found

    def container_pids(self) -> list[int]:
        """Host pids of every process in the container's cgroup, the agent's included."""
        found: list[int] = []
        for folder, _, _ in os.walk(self.freezer):
            found.extend(self._read_procs(Path(folder)))
        return found

    def place(self, container_pid: int) -> None:
        """Move the process that is `container_pid` inside the container into the agent's cgroup."""
        host_pid = next((p for p in self.container_pids() if _inner_pid(p) == container_pid), None)
        if host_pid is None:
            raise CgroupError(f"no process {container_pid} in the container's cgroup {self.freezer}")
        try:
            for folder in self.agent_folders:
                (folder / "cgroup.procs").write_text(str(host_pid))
        except OSError as exc:
            raise CgroupError(f"cannot move process {host_pid} into {self.freezer / AGENT_CGROUP}: {exc}") from None

    def host_pid_of(self, container_pid: int) -> int | None:
        """The host pid of the container's process `container_pid` if it is in the agent's cgroup."""
        return next((p for p in self.agent_pids() if _inner_pid(p) == container_pid), None)

    def escaped(self, uids: set[int]) -> list[int]:
        """Host pids of processes of `uids` that are in the container but not in the agent's cgroup."""
        inside = set(self.agent_pids())
        return [p for p in self.container_pids() if p not in inside and _uids(p) & uids]

    # -- freezing ------------------------------------------------------------------
    def freeze(self) -> None:
        """Freeze the agent's cgroup and return once the kernel says every process in it is frozen."""
        folder = self.freezer / AGENT_CGROUP
        try:
            if self.version == 1:
                (folder / "freezer.state").write_text("FROZEN")
            else:
                (folder / "cgroup.freeze").write_text("1")
        except OSError as exc:
            raise CgroupError(f"cannot freeze {folder}: {exc}") from None
        deadline = time.monotonic() + FREEZE_WAIT_S
        while not self.is_frozen():
            if time.monotonic() > deadline:
                self.thaw()
                raise CgroupError(f"the agent's cgroup {folder} did not freeze within {FREEZE_WAIT_S:g} s")
            if self.version == 1:  # v1 retries only when asked again
                with contextlib.suppress(OSError):
                    (folder / "freezer.state").write_text("FROZEN")
            time.sleep(0.002)

    def is_frozen(self) -> bool:
        folder = self.freezer / AGENT_CGROUP
        try:
            if self.version == 1:
                return (folder / "freezer.state").read_text().strip() == "FROZEN"
            events = dict(line.split(" ", 1) for line in (folder / "cgroup.events").read_text().splitlines())
            return events.get("frozen", "0").strip() == "1"
        except OSError as exc:
            raise CgroupError(f"cannot read the freezer state of {folder}: {exc}") from None

    def thaw(self) -> None:
        folder = self.freezer / AGENT_CGROUP
        try:
            if self.version == 1:
                (folder / "freezer.state").write_text("THAWED")
            else:
                (folder / "cgroup.freeze").write_text("0")
        except FileNotFoundError:
            return  # the container is gone
        except OSError as exc:
            raise CgroupError(f"cannot thaw {folder}: {exc}") from None

    def kill_all(self, keep: frozenset[int] = frozenset()) -> int:
        """SIGKILL every process in the agent's cgroup but `keep` (host pids), each round frozen
        first so none can fork meanwhile (a fork bomb included), then thawed so the signal lands
        (a frozen process dies only once thawed); return how many were killed."""
        killed = 0
        was_frozen = self.is_frozen()
        for _ in range(50):
            self.freeze()
            victims = [p for p in self.agent_pids() if p not in keep]
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed += len(victims)
            self.thaw()
            if not victims:
                break
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(p in victims for p in self.agent_pids()):
                time.sleep(0.005)
        if was_frozen:
            self.freeze()
        return killed

    def remove(self) -> None:
        """Remove the child cgroups this object made (once their processes are gone); never raises."""
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.made = []


def _status(host_pid: int) -> list[str]:
    try:
        return Path(f"/proc/{host_pid}/status").read_text().splitlines()
    except OSError:
        return []


def _inner_pid(host_pid: int) -> int | None:
    """A process's pid in its innermost pid namespace (the container's), from NSpid."""
    for line in _status(host_pid):
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return None


def _uids(host_pid: int) -> set[int]:
    for line in _status(host_pid):
        if line.startswith("Uid:"):
            return {int(x) for x in line.split()[1:]}
    return set()


def thaw_left_frozen(container_id: str) -> None:
    """Thaw the agent cgroup of a container whose harness died while the agent was frozen (a SIGKILL
    during a score call). A frozen process cannot die, so the engine could not kill the container: its
    first process waits for them forever. That process may be exiting already (its /proc entry no
    longer names the cgroup), so the container's cgroup is found by its id where Docker's cgroupfs and
    systemd drivers put it."""
    for root, point, kind, options in _mounts():
        if root != "/" or not (kind == "cgroup2" or (kind == "cgroup" and "freezer" in options)):
            continue
        for place in (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"):
            folder = Path(point) / place
            if (folder / AGENT_CGROUP).is_dir():
                AgentCgroup(version=2 if kind == "cgroup2" else 1, freezer=folder, pids=None).thaw()
