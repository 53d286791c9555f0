"""Running `rebench rescore`: each planned attempt in a fresh sandbox of its environment's
current version, scored with the current scorer and anchors, one row per attempt.

Rows are written once per attempt, in one transaction, when its re-scoring ends: a run killed
mid-way has a row for every attempt it finished and none for the rest. The same command again
(same selection, same environment contents, same machine and backend) finds that run, whose
process is gone, and re-scores only the attempts without a row; `(run_id, attempt_id)` is
unique, so nothing is ever counted twice. A run whose process still lives is refused.

Anchors: where the attempt's profile measures window anchors (a `hardware_dependent` profile
under `window_anchors`, rebench.scoring.window), the starting and reference solutions are scored
in rounds beside the snapshots in the same fresh sandbox, and those medians normalize the
re-score; else the anchors in force on this machine (calibrated here, else declared).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from sqlalchemy import select

from rebench.calibration import ResolvedAnchors, hardware_fingerprint, resolve_anchors
from rebench.environments.metadata import SnapshotCap
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.harness_files import kit_version
from rebench.processes import pid_alive
from rebench.rescoring.plan import (
    RULE_BEST,
    RULE_RESCORE,
    AttemptPlan,
    Plan,
    Selection,
    plan_attempts,
    selected_ids,
)
from rebench.scoring.heldout import split_anchors
from rebench.scoring.normalize import normalize
from rebench.scoring.rescore import rescore
from rebench.scoring.result import ScoreResult
from rebench.scoring.window import anchor_solutions, resolved
from rebench.store.db import Store
from rebench.store.models import ScoreKind
from rebench.store.rescores import Rescore, RescoreRun, RescoreRunStatus, RescoreStatus

if TYPE_CHECKING:
    from rebench.sandbox.base import Sandbox

Log = Callable[[str], None]


class RescoreOutcome(BaseModel):
    """What one call did: the run, what it re-scored now, what was skipped, what failed."""

    run_id: int
    resumed: bool
    status: RescoreRunStatus
    rescored: dict[int, float | None] = Field(default_factory=dict)
    """Attempt id -> normalized re-score, for attempts re-scored by this call."""
    already: list[int] = Field(default_factory=list)
    """Attempts the run had done before this call (resumed)."""
    skipped: dict[int, str] = Field(default_factory=dict)
    failed: dict[int, str] = Field(default_factory=dict)


def _now() -> datetime:
    return datetime.now(UTC)


def _alive(pid: int | None, host: str | None) -> bool:
    if pid is None or host != socket.gethostname() or pid == os.getpid():
        return False
    return pid_alive(pid)


def _environments(store: Store, registry: EnvironmentRegistry, plan: Plan) -> dict[str, dict[str, Any]]:
    """Per `environment/profile` re-scored: version, content hash and the anchors in force here."""
    out: dict[str, dict[str, Any]] = {}
    for item in plan.todo:
        key = f"{item.environment}/{item.profile}"
        if key in out:
            continue
        env = registry.get(item.environment)
        anchors = resolve_anchors(store, env, item.profile)
        out[key] = {"version": env.version, "content_hash": env.content_hash(item.profile),
                    "anchors": anchors.model_dump()}
    return out


def _open_run(store: Store, selection: Selection, backend: str, parallel: int, plan: Plan,
              environments: dict[str, dict[str, Any]], ids: list[int]) -> tuple[int, bool]:
    """The unfinished run of the same selection, contents, machine and backend, else a new one."""
    hardware = hardware_fingerprint()
    with store.session() as session:
        previous = session.scalars(select(RescoreRun).where(
            RescoreRun.status != RescoreRunStatus.DONE, RescoreRun.backend == backend,
            RescoreRun.hardware == hardware.key).order_by(RescoreRun.id.desc())).all()
        for run in previous:
            same = _environments_key(run.environments) == _environments_key(environments)
            if run.selection != selection.key() or not same:
                continue
            if _alive(run.pid, run.host):
                raise RebenchError(f"rescore run {run.id} of this selection is still running (pid {run.pid}); "
                                   "wait for it to end or stop it first")
            run.pid, run.host, run.status, run.parallel = (os.getpid(), socket.gethostname(),
                                                           RescoreRunStatus.RUNNING, parallel)
            return run.id, True
        if not plan.todo:
            reasons = "; ".join(f"attempt {i}: {why}" for i, why in sorted(plan.skipped.items())[:3])
            more = f" and {len(plan.skipped) - 3} more" if len(plan.skipped) > 3 else ""
            raise RebenchError(f"nothing to re-score: {reasons or 'no attempts selected'}{more}")
        run = RescoreRun(selection=selection.key(), attempt_ids=ids, backend=backend, hardware=hardware.key,
                         hardware_description=hardware.description, environments=environments,
                         kit_version=kit_version(), parallel=parallel, pid=os.getpid(),
                         host=socket.gethostname())
        session.add(run)
        session.flush()
        return run.id, False


def _environments_key(environments: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to be resumed: each environment's version and contents (not the
    anchors in force, which a calibration in between may change: those stay as the run recorded)."""
    return {key: (value.get("version"), value.get("content_hash")) for key, value in environments.items()}


def rescore_attempts(store: Store, selection: Selection, *, backend: str, parallel: int = 1,
                     registry: EnvironmentRegistry | None = None, log: Log = lambda _m: None,
                     build: Callable[[Environment, str], None] | None = None) -> RescoreOutcome:
    """Re-score the selected attempts (module docstring). Bad input raises RebenchError before
    anything is written: an unknown attempt, campaign or environment, nothing to re-score."""
    if parallel < 1:
        raise RebenchError(f"invalid --parallel {parallel}: must be 1 or more")
    registry = registry or EnvironmentRegistry()
    with store.session() as session:
        ids = selected_ids(session, selection, registry)
    if not ids:
        raise RebenchError(f"nothing to re-score: no attempts of {selection.describe()} in this database")
    plan = plan_attempts(store, ids, registry)
    environments = _environments(store, registry, plan)
    run_id, resumed = _open_run(store, selection, backend, parallel, plan, environments, ids)
    with store.session() as session:
        run = session.get_one(RescoreRun, run_id)
        ids = [int(i) for i in run.attempt_ids]
        done = set(session.scalars(select(Rescore.attempt_id).where(Rescore.run_id == run_id)))
        recorded = run.environments
    outcome = RescoreOutcome(run_id=run_id, resumed=resumed, status=RescoreRunStatus.RUNNING,
                             already=sorted(done))
    if resumed:  # the run's own list, minus what it finished; planned again (snapshots may have gone since)
        plan = plan_attempts(store, [i for i in ids if i not in done], registry)
    else:
        plan.todo = [p for p in plan.todo if p.attempt_id not in done]
    for attempt_id, why in plan.skipped.items():
        if attempt_id not in done:
            _write(store, Rescore(run_id=run_id, attempt_id=attempt_id, status=RescoreStatus.SKIPPED, reason=why))
            outcome.skipped[attempt_id] = why
    todo = _built(plan.todo, registry, build or _build_for(backend), log, store, run_id, outcome)
    asyncio.run(_score_all(store, run_id, todo, registry, backend, parallel, recorded, log, outcome))
    status = RescoreRunStatus.INCOMPLETE if outcome.failed else RescoreRunStatus.DONE
    with store.session() as session:
        run = session.get_one(RescoreRun, run_id)
        run.status, run.pid = status, None
        run.finished_at = _now() if status == RescoreRunStatus.DONE else None
    outcome.status = status
    return outcome


def _build_for(backend: str) -> Callable[[Environment, str], None]:
    def build(env: Environment, profile: str) -> None:
        from rebench.environments.build import assets_dir, local_python
        from rebench.preflight import check

        check(env, profile, "run", backend=backend)
        assets_dir(env, profile)
        local_python(env, profile)
        if backend == "docker":
            from rebench.images import build_environment_image

            build_environment_image(env, profile)

    return build


def _built(todo: list[AttemptPlan], registry: EnvironmentRegistry, build: Callable[[Environment, str], None],
           log: Log, store: Store, run_id: int, outcome: RescoreOutcome) -> list[AttemptPlan]:
    """Build each environment and profile once; the attempts of one that cannot be built are skipped."""
    broken: dict[tuple[str, str], str] = {}
    for key in sorted({(p.environment, p.profile) for p in todo}):
        env = registry.get(key[0])
        log(f"building {env.name} ({key[1]}) version {env.version}")
        try:
            build(env, key[1])
        except Exception as exc:  # any build failure: the attempts are listed with it, the rest go on
            broken[key] = f"environment {env.name} version {env.version} ({key[1]}) cannot be rebuilt: " \
                          f"{' '.join(str(exc).split())[:300]}"
    kept = []
    for item in todo:
        why = broken.get((item.environment, item.profile))
        if why is None:
            kept.append(item)
        else:
            _write(store, Rescore(run_id=run_id, attempt_id=item.attempt_id, status=RescoreStatus.SKIPPED,
                                  reason=why))
            outcome.skipped[item.attempt_id] = why
    return kept


async def _score_heldout(sandbox: Sandbox, final: Path, timeout_s: float, cap: SnapshotCap) -> ScoreResult:
    """The solution the attempt's held-out final scored, scored on the held-out split again
    (rebench.scoring.heldout; AttemptPlan.heldout_snapshot)."""
    from rebench.environments.install import FINAL_PARAMS_FILE
    from rebench.scoring.rescore import restore_snapshot
    from rebench.scoring.run import run_scoring

    error = await restore_snapshot(sandbox, final, cap)
    if error is not None:
        return ScoreResult(raw=None, message={"error": error})
    return await run_scoring(sandbox, timeout_s, params=FINAL_PARAMS_FILE)


def _write(store: Store, row: Rescore) -> None:
    with store.session() as session:
        session.add(row)


async def _score_all(store: Store, run_id: int, todo: list[AttemptPlan], registry: EnvironmentRegistry,
                     backend: str, parallel: int, recorded: dict[str, Any], log: Log,
                     outcome: RescoreOutcome) -> None:
    slots = asyncio.Semaphore(parallel)

    async def one(item: AttemptPlan) -> None:
        async with slots:
            try:
                row = await _score_one(store, item, registry.get(item.environment), backend, recorded, log)
            except Exception as exc:
                outcome.failed[item.attempt_id] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                log(f"attempt {item.attempt_id}: failed: {outcome.failed[item.attempt_id]}")
                return
            row.run_id = run_id
            _write(store, row)
            outcome.rescored[item.attempt_id] = row.final_normalized
            log(f"attempt {item.attempt_id}: re-scored raw {row.final_raw}, normalized {row.final_normalized}")

    await asyncio.gather(*(one(item) for item in todo))


async def _score_one(store: Store, item: AttemptPlan, env: Environment, backend: str,
                     recorded: dict[str, Any], log: Log) -> Rescore:
    """Score one attempt's snapshots in a fresh sandbox; the row to write (not written here)."""
    from rebench.environments.build import assets_dir
    from rebench.environments.install import install_environment
    from rebench.sandbox.base import SandboxSpec
    from rebench.sandboxes import create_sandbox

    profile = env.profile(item.profile)
    began = time.monotonic()
    spec = SandboxSpec(attempt_id=item.attempt_id, environment=env.name, profile=item.profile,
                       cpus=profile.resources.cpus, memory_gb=profile.resources.memory_gb)
    assets = assets_dir(env, item.profile, build=False)
    windowed = profile.hardware_dependent and profile.rescore.window_anchors
    solutions = anchor_solutions(env, item.profile, assets) if windowed else None
    # Under `best` each call's solution is scored once, as the call scored it; the others take the profile's repeats.
    repeats = 1 if item.rule == RULE_BEST else (
        profile.rescore.repeats if item.rule == RULE_RESCORE or profile.final_score == RULE_RESCORE else 1)
    calls: list[dict[str, Any]] = []

    def record(result: ScoreResult, kind: ScoreKind, extra: dict[str, object]) -> None:
        calls.append({"kind": kind.value, "raw": result.raw if result.valid else None, "valid": result.valid,
                      "message": result.message, **extra})

    sandbox = create_sandbox(backend, spec, env)
    await sandbox.start()
    try:
        log(f"attempt {item.attempt_id}: {env.name} ({item.profile}) in a fresh sandbox: {item.describe()}")
        for line in item.skipped_snapshots:
            log(f"attempt {item.attempt_id}: {line}")
        await install_environment(sandbox, env, item.profile, assets)
        summary = await rescore(sandbox, item.candidates, candidates=len(item.candidates), repeats=repeats,
                                direction=profile.direction, timeout_s=profile.score_timeout_s, record=record,
                                log=lambda m: log(f"attempt {item.attempt_id}: {m}"), anchors=solutions,
                                cap=profile.snapshot)
        heldout = None
        if profile.final_split is not None and item.heldout_snapshot is not None:
            heldout = await _score_heldout(sandbox, Path(item.heldout_snapshot), profile.score_timeout_s,
                                           profile.snapshot)
            record(heldout, ScoreKind.HELDOUT, {"snapshot": item.heldout_snapshot, "split": "final"})
    finally:
        with contextlib.suppress(Exception):
            await sandbox.stop()
    in_force = ResolvedAnchors.model_validate(recorded[f"{env.name}/{item.profile}"]["anchors"])
    held = split_anchors(in_force, profile.final_split) if profile.final_split is not None else None
    anchors = resolved(summary.anchors) or in_force
    final_raw = summary.final_raw  # under `best` (one score each) the best of the calls re-scored, as the rule takes
    return Rescore(attempt_id=item.attempt_id, status=RescoreStatus.DONE, rule=item.rule,
                   env_version=env.version, content_hash=env.content_hash(item.profile),
                   final_raw=final_raw, final_normalized=normalize(final_raw, anchors.start, anchors.reference),
                   anchors_start=anchors.start, anchors_reference=anchors.reference, anchors_kind=anchors.kind,
                   heldout_raw=heldout.raw if heldout is not None and heldout.valid else None,
                   heldout_normalized=(None if heldout is None or held is None else normalize(
                       heldout.raw if heldout.valid else None, held.start, held.reference)),
                   scores=calls, skipped_snapshots=[*item.skipped_snapshots, *summary.skipped],
                   duration_s=time.monotonic() - began)
