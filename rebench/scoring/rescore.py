"""Final scoring for noisy environments: `final_score = "rescore_best"`.

On shared hardware one timing call can be lucky, and under RE-Bench's rule (the best
intermediate score counts) an agent banks that luck. With this rule the harness:

1. snapshots the solution folder just before every score call the agent makes (under the
   attempt's snapshot folder, within the profile's snapshot budget; a snapshot whose content
   equals an earlier one is not kept twice and its budget is given back);
2. when the attempt has ended (clock stopped, the agent's processes killed), restores the
   snapshots behind the best `candidates` intermediate scores, distinct by content, into the
   same sandbox's solution folder and scores each `repeats` times (ScoreKind.RESCORE events);
3. takes the median of each snapshot's re-scores and, as the final raw score, the best median.

Intermediate scores stay what the agent saw; RE-Bench's own number (the best intermediate
score) is kept beside the final one on the attempt row (`rule_raw`).

With window anchors (timing profiles, rebench.scoring.window) step 2 runs in rounds: the
starting solution, the reference solution, then each candidate, once each per round
(ScoreKind.ANCHOR_START / ANCHOR_REFERENCE events for the first two), `repeats` rounds; the
anchors' medians normalize the final score.

An invalid re-score (the solution crashed, timed out or gave a wrong answer this time) is
counted as a failed re-score and ranks below every valid value in the median: a snapshot
whose re-scores are invalid half the time or more has no median (with an even number of
repeats, the two middle values are averaged and either one invalid makes the median
invalid). A snapshot that was cut by the snapshot budget is not re-scored (it is not the
solution that was scored) and is listed as skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from rebench.environments.metadata import SnapshotCap
from rebench.sandbox.base import Sandbox
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport
from rebench.sandbox.snapshot_check import check_folder
from rebench.scoring.normalize import final_raw_score, is_valid
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import CallTokens, run_scoring
from rebench.store.models import ScoreEvent, ScoreKind

Direction = Literal["lower", "higher"]
FinalRule = Literal["best", "last", "rescore_best"]
RULE_ONLY: Literal["best"] = "best"
"""What `final_rule` says when a rescore_best attempt could not be re-scored (interrupted, the
sandbox died): its final number is RE-Bench's rule, the best intermediate score."""
RESTORE_TIMEOUT_S = 120.0


def folder_digest(root: Path) -> str:
    """sha256 over a folder's names, kinds, executable bits, file contents and link targets."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel_folder = os.path.relpath(folder, root)
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            digest.update(f"{os.path.join(rel_folder, name)}\0".encode())
            if stat.S_ISLNK(info.st_mode):
                digest.update(b"L" + os.readlink(path).encode() + b"\0")
                continue
            digest.update(b"X" if info.st_mode & 0o111 else b"F")
            # Never through a link swapped in since, nor into a FIFO or a device (which would never end).
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ValueError(f"{path} is not a regular file")
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            digest.update(b"\0")
        for name in dirs:
            if not os.path.islink(os.path.join(folder, name)):
                digest.update(f"{os.path.join(rel_folder, name)}/\0".encode())
    return digest.hexdigest()


class ScoreSnapshot(BaseModel):
    """The solution as it was when one intermediate score call started."""

    path: str
    sha256: str | None
    """None when the snapshot is incomplete (cut by the budget): it cannot be re-scored."""
    score_id: int | None = None
    raw: float | None = None
    duplicate_of: str | None = None
    """The earlier snapshot with the same content (this one's copy was not kept)."""


class ScoreSnapshots:
    """Snapshots taken at an attempt's score calls, under `root` (score-001, score-002, ...)."""

    def __init__(self, root: Path, budget: SnapshotBudget) -> None:
        self.root = root
        self.budget = budget
        self.taken: list[ScoreSnapshot] = []
        self._by_digest: dict[str, str] = {}

    def restore(self, events: list[dict[str, Any]], raws: dict[int, float | None]) -> None:
        """Carry on from the snapshots an earlier harness process took for this attempt (a resumed
        human attempt): `events` are their `snapshot` events' payloads (those with a score id), in
        order; `raws` the raw score of each score event. Numbering, dedupe and the budget go on."""
        for data in events:
            score_id, path = data.get("score_id"), data.get("path")
            if score_id is None or not path:
                continue
            digest: str | None = data.get("sha256")
            earlier = self._by_digest.get(digest) if digest is not None else None
            self.taken.append(ScoreSnapshot(path=str(path), sha256=digest, score_id=int(score_id),
                                            raw=raws.get(int(score_id)), duplicate_of=earlier))
            if digest is not None and earlier is None:
                self._by_digest[digest] = str(path)
            if earlier is None:
                self.budget.used_bytes += int(data.get("bytes") or 0)
                self.budget.used_files += int(data.get("files") or 0)

    async def take(self, sandbox: Sandbox) -> tuple[ScoreSnapshot, SnapshotReport]:
        target = self.root / f"score-{len(self.taken) + 1:03d}"
        used = (self.budget.used_bytes, self.budget.used_files)
        report = await sandbox.copy_out(sandbox.paths.solution, str(target), self.budget)
        complete = not report.capped and report.left_out_count == 0
        digest = await asyncio.to_thread(folder_digest, target) if complete else None
        snapshot = ScoreSnapshot(path=str(target), sha256=digest)
        if digest is not None and digest in self._by_digest:
            shutil.rmtree(target, ignore_errors=True)
            self.budget.used_bytes, self.budget.used_files = used  # not kept, so not counted
            snapshot = ScoreSnapshot(path=self._by_digest[digest], sha256=digest, duplicate_of=self._by_digest[digest])
        elif digest is not None:
            self._by_digest[digest] = str(target)
        self.taken.append(snapshot)
        return snapshot, report


async def final_candidate(path: str | None, last: ScoreEvent | None) -> ScoreSnapshot:
    """The solution the agent ended with, as the one candidate when no snapshots were taken at
    score calls; it stands for the last valid score (nothing, when there was none)."""
    if path is None or last is None:
        return ScoreSnapshot(path=path or "", sha256=None)
    return ScoreSnapshot(path=path, sha256=await asyncio.to_thread(folder_digest, Path(path)),
                         score_id=last.id, raw=last.raw)


class CandidateRescore(BaseModel):
    score_id: int
    snapshot: str
    sha256: str
    intermediate_raw: float
    raws: list[float | None] = Field(default_factory=list)
    failed: int = 0
    """Re-scores that were invalid although this snapshot scored validly when the agent scored it."""
    median: float | None = None


class AnchorSolutions(BaseModel):
    """The starting and the reference solution as host folders, each laid into the emptied
    solution folder in order (the workspace, then the build's, then for the reference its own
    files over them: as installing the environment and calibrating lay them)."""

    start: list[str]
    reference: list[str]


class WindowAnchors(BaseModel):
    """The anchors measured in the re-scoring window: each solution's re-scores and their median."""

    start_raws: list[float | None] = Field(default_factory=list)
    reference_raws: list[float | None] = Field(default_factory=list)
    start: float | None = None
    reference: float | None = None


class RescoreSummary(BaseModel):
    """What the re-scoring did, for the attempt's record (a `note` event) and its row."""

    final_raw: float | None
    candidates: list[CandidateRescore]
    anchors: WindowAnchors | None = None
    skipped: list[str] = Field(default_factory=list)
    failed: int = 0
    repeats: int
    agent_processes_killed: int | None = None


def rescore_median(values: Sequence[float | None], direction: Direction) -> float | None:
    """The median of re-scores, an invalid one ranking below every valid one (module docstring)."""
    if not values:
        return None
    valid = sorted((float(v) for v in values if v is not None and is_valid(v)), reverse=direction == "higher")
    ranked: list[float | None] = [*valid, *([None] * (len(values) - len(valid)))]
    middle = len(ranked) // 2
    if len(ranked) % 2:
        return ranked[middle]
    low, high = ranked[middle - 1], ranked[middle]
    return None if low is None or high is None else (low + high) / 2


def choose_candidates(snapshots: Sequence[ScoreSnapshot], count: int,
                      direction: Direction) -> tuple[list[ScoreSnapshot], list[str]]:
    """The snapshots behind the best `count` valid intermediate scores, distinct by content;
    also what was passed over (incomplete snapshots) and why."""
    scored = [s for s in snapshots if s.score_id is not None and is_valid(s.raw)]
    scored.sort(key=lambda s: float(s.raw) if direction == "lower" else -float(s.raw))  # type: ignore[arg-type]
    chosen: list[ScoreSnapshot] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for snapshot in scored:
        if len(chosen) >= count:
            break
        if snapshot.sha256 is None:
            skipped.append(f"score {snapshot.score_id} ({snapshot.raw}): snapshot {snapshot.path} was cut by "
                           "the snapshot budget, so it is not the solution that was scored")
            continue
        if snapshot.sha256 in seen:
            continue
        seen.add(snapshot.sha256)
        chosen.append(snapshot)
    return chosen, skipped


async def restore_snapshot(sandbox: Sandbox, snapshot: Path, cap: SnapshotCap | None = None) -> str | None:
    """Replace the sandbox's solution folder by a snapshot's content; an error line, or None.

    The host folder is checked first (rebench.sandbox.snapshot_check): what a snapshot copy never
    makes (a link or hard link out, a FIFO, a device, a file past the profile's `cap`) is refused,
    not copied, so nothing outside it is read and nothing unbounded is written."""
    limits = (None, None) if cap is None else (int(cap.max_bytes), cap.max_files)
    why = await asyncio.to_thread(check_folder, snapshot, *limits)
    if why is not None:
        return f"snapshot {snapshot} cannot be restored: {why}"
    return await restore_layers(sandbox, [snapshot])


async def restore_layers(sandbox: Sandbox, layers: Sequence[Path]) -> str | None:
    """Empty the sandbox's solution folder and copy host folders into it, in order (a later one's
    files over an earlier one's); an error line, or None."""
    solution = sandbox.paths.solution
    # The agent owns the folder above the solution, so `solution` may be a symbolic link it made
    # (to /etc, say): root must not follow it. The name is removed, whatever it is, and made again
    # as a plain folder of the agent's (the agent's processes are dead by now, so nothing races this).
    cleared = await sandbox.exec(
        ["bash", "-c", 'rm -rf -- "$1" && mkdir -m 0755 -- "$1" && { ! id -u agent >/dev/null 2>&1 '
         '|| chown agent:agent -- "$1"; }', "restore", solution],
        user="root", timeout=RESTORE_TIMEOUT_S)
    if not cleared.ok:
        return f"could not empty the solution folder: {cleared.stderr.strip()[-300:] or cleared.exit_code}"
    for layer in layers:
        await sandbox.copy_in(str(layer), solution, user="agent")
    return None


Record = Callable[[ScoreResult, ScoreKind, dict[str, object]], object]


async def _score_layers(sandbox: Sandbox, layers: Sequence[Path], restore: bool, error: str | None,
                        timeout_s: float, tokens: CallTokens | None, snapshot: bool = False,
                        cap: SnapshotCap | None = None) -> tuple[ScoreResult, str | None]:
    """Lay a solution into the solution folder (unless it is there already) and score it once;
    `snapshot`: the one layer is an agent's snapshot, checked (within `cap`) before it is restored."""
    if restore:
        error = await (restore_snapshot(sandbox, layers[0], cap) if snapshot else restore_layers(sandbox, layers))
    if error is not None:
        return ScoreResult(raw=None, message={"error": error}), error
    return await run_scoring(sandbox, timeout_s, tokens), None


async def rescore(sandbox: Sandbox, snapshots: Sequence[ScoreSnapshot], *, candidates: int, repeats: int,
                  direction: Direction, timeout_s: float, record: Record,
                  log: Callable[[str], None] = lambda _m: None, tokens: CallTokens | None = None,
                  anchors: AnchorSolutions | None = None, cap: SnapshotCap | None = None) -> RescoreSummary:
    """Re-score the best candidates (module docstring); `record` stores each re-score as it comes.
    With `anchors`, the starting and reference solutions are scored in every round beside them.
    Each snapshot is checked before it is restored (restore_snapshot), within `cap` when given."""
    chosen, skipped = choose_candidates(snapshots, candidates, direction)
    results: list[CandidateRescore] = []
    for snapshot in chosen:
        assert snapshot.score_id is not None and snapshot.raw is not None and snapshot.sha256 is not None
        results.append(CandidateRescore(score_id=snapshot.score_id, snapshot=snapshot.path, sha256=snapshot.sha256,
                                        intermediate_raw=snapshot.raw))
    window = WindowAnchors() if anchors is not None and results else None
    # Without anchors, each candidate's repeats run back to back (one restore each); with them, round by round.
    order = ([(repeat, index) for repeat in range(1, repeats + 1) for index in range(len(results))] if window
             else [(repeat, index) for index in range(len(results)) for repeat in range(1, repeats + 1)])
    errors: dict[int, str | None] = {}
    for repeat, index in order:
        if window is not None and anchors is not None and index == 0:
            for kind, layers, raws in ((ScoreKind.ANCHOR_START, anchors.start, window.start_raws),
                                       (ScoreKind.ANCHOR_REFERENCE, anchors.reference, window.reference_raws)):
                log(f"re-scoring window: {kind.value.removeprefix('anchor_')} solution, run {repeat}/{repeats}")
                result, _ = await _score_layers(sandbox, [Path(p) for p in layers], True, None, timeout_s, tokens)
                record(result, kind, {"anchor": kind.value.removeprefix("anchor_"), "repeat": repeat})
                raws.append(result.raw if result.valid else None)
        entry = results[index]
        log(f"re-scoring candidate {index + 1}/{len(results)}, run {repeat}/{repeats}")
        result, errors[index] = await _score_layers(sandbox, [Path(entry.snapshot)], window is not None or repeat == 1,
                                                    errors.get(index), timeout_s, tokens, snapshot=True, cap=cap)
        record(result, ScoreKind.RESCORE, {"rescore_of": entry.score_id, "snapshot": entry.snapshot,
                                           "sha256": entry.sha256, "repeat": repeat})
        entry.raws.append(result.raw if result.valid else None)
    for entry in results:
        entry.failed = sum(1 for raw in entry.raws if raw is None)
        entry.median = rescore_median(entry.raws, direction)
    if window is not None:
        window.start = rescore_median(window.start_raws, direction)
        window.reference = rescore_median(window.reference_raws, direction)
    best = final_raw_score([c.median for c in results], rule="best", direction=direction)
    return RescoreSummary(final_raw=best, candidates=results, anchors=window,
                          skipped=skipped, failed=sum(c.failed for c in results), repeats=repeats)

