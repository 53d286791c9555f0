"""Calibrated anchors: timing scores mean something only on the hardware they were measured on.

`rebench envs calibrate` scores the starting and the reference solution several
times here and stores, with a fingerprint of this machine, the best run of each (the
median under `final_score = "rescore_best"`: the rule attempts are judged by).
Normalization then uses calibrated anchors for the same hardware, environment
version and profile when they exist, and the environment's declared ones
otherwise; reports say which. Timings are measured in turns (start, reference,
start, ...), and a re-scored timing's final score uses the anchors measured beside
its re-scores instead (rebench.scoring.window).
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel
from sqlalchemy import select

from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.scoring.normalize import (
    ResolvedAnchors as ResolvedAnchors,  # re-exported: reports and the API name it here
)
from rebench.scoring.normalize import final_raw_score
from rebench.scoring.rescore import rescore_median
from rebench.store.db import Store
from rebench.store.measurements import Calibration

if TYPE_CHECKING:
    from rebench.gateway.attempt import AttemptGateway
    from rebench.sandbox.base import Sandbox
    from rebench.scoring.rescore import AnchorSolutions


class HardwareFingerprint(BaseModel):
    key: str
    description: str


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _gpus() -> list[str]:
    from rebench.gpus import gpu_listing

    return [line.split("(")[0].strip() for line in gpu_listing()]


def hardware_fingerprint() -> HardwareFingerprint:
    """A short stable key for "the same machine type": CPU model, core count, architecture, GPUs."""
    description = f"{_cpu_model()} x{os.cpu_count()} ({platform.machine()})"
    gpus = _gpus()
    if gpus:
        description += " + " + ", ".join(gpus)
    return HardwareFingerprint(key=hashlib.sha256(description.encode()).hexdigest()[:12], description=description)


def resolve_anchors(store: Store | None, env: Environment, profile: str,
                    hardware: str | None = None) -> ResolvedAnchors:
    """This hardware's calibrated anchors in `store`, else the declared ones (also when there is no
    store); with a held-out split, its anchors beside them, from the newest calibration that
    measured them, else declared."""
    spec = env.profile(profile)
    key = None if store is None else hardware or hardware_fingerprint().key
    rows = [] if store is None else _calibrations(store, env, profile, key)
    heldout = None
    if spec.final_split is not None:
        declared = spec.final_split.anchors
        measured = next(((r.heldout_start_raw, r.heldout_reference_raw) for r in rows
                         if r.heldout_start_raw is not None and r.heldout_reference_raw is not None), None)
        heldout = (ResolvedAnchors(start=declared.start, reference=declared.reference, kind="declared")
                   if measured is None else
                   ResolvedAnchors(start=measured[0], reference=measured[1], kind="calibrated", hardware=key))
    if not rows:
        return ResolvedAnchors(start=spec.anchors.start, reference=spec.anchors.reference, kind="declared",
                               heldout=heldout)
    return ResolvedAnchors(start=rows[0].start_raw, reference=rows[0].reference_raw, kind="calibrated", hardware=key,
                           heldout=heldout)


def _calibrations(store: Store, env: Environment, profile: str, hardware: str | None) -> list[Calibration]:
    """This hardware's calibrations of the environment version and profile, newest first."""
    with store.session() as session:
        return list(session.scalars(
            select(Calibration)
            .where(
                Calibration.environment == env.name,
                Calibration.env_version == env.version,
                Calibration.profile == profile,
                Calibration.hardware == hardware,
            )
            .order_by(Calibration.id.desc())
        ))


class AnchorSamples(BaseModel):
    """Raw scores of the starting and reference solutions, one per run; `heldout_*` the same runs
    scored on the profile's held-out split (`final_split`), None when it has none."""

    start: list[float | None]
    reference: list[float | None]
    heldout_start: list[float | None] | None = None
    heldout_reference: list[float | None] | None = None


async def measure_anchors(
    env: Environment,
    profile: str,
    *,
    backend: str,
    repeats: int,
    log: Callable[[str], None],
) -> AnchorSamples:
    """Score the starting solution and the reference solution `repeats` times each, in one fresh
    sandbox (the same path an attempt's scores take), and as many times each on the held-out split
    where the profile declares one. Timings (`hardware_dependent`) are taken in turns, start,
    reference, start, ..., so a drift in the machine's speed moves both alike, as in an attempt's
    re-scoring window (rebench.scoring.window); other scores one solution after the other (the
    reference's run.sh, if any, runs once)."""
    from rebench.environments.build import assets_dir
    from rebench.scoring.window import anchor_solutions

    timeout_s = env.profile(profile).score_timeout_s
    heldout = env.profile(profile).final_split is not None
    solutions = (anchor_solutions(env, profile, assets_dir(env, profile, build=False))
                 if env.profile(profile).hardware_dependent else None)
    async with scoring_sandbox(env, profile, backend) as (sandbox, gateway):
        score = _Scorer(sandbox, gateway, timeout_s, repeats, heldout, log)
        if solutions is not None:
            return await _interleaved(env.name, sandbox, score, solutions)
        start = await score.runs("starting")
        await load_reference(sandbox, env, log)
        reference = await score.runs("reference")
        return AnchorSamples(start=start[0], reference=reference[0], heldout_start=start[1],
                             heldout_reference=reference[1])


class _Scorer:
    """Scores the solution in the sandbox and logs each run; on the held-out split too when asked."""

    def __init__(self, sandbox: Sandbox, gateway: AttemptGateway | None, timeout_s: float, repeats: int,
                 heldout: bool, log: Callable[[str], None]) -> None:
        self.sandbox, self.gateway, self.timeout_s = sandbox, gateway, timeout_s
        self.repeats, self.heldout, self.log = repeats, heldout, log

    async def one(self, label: str, index: int, heldout: bool) -> float | None:
        from rebench.environments.install import FINAL_PARAMS_FILE, PARAMS_FILE
        from rebench.scoring.run import run_scoring

        params = FINAL_PARAMS_FILE if heldout else PARAMS_FILE
        result = await run_scoring(self.sandbox, self.timeout_s, self.gateway, params)
        split = " on the held-out split" if heldout else ""
        self.log(f"{label} solution{split}, run {index + 1}/{self.repeats}: {result.raw}")
        return result.raw

    async def runs(self, label: str) -> tuple[list[float | None], list[float | None] | None]:
        """All runs of the solution in place: on the intermediate split, then on the held-out one."""
        values = [await self.one(label, index, False) for index in range(self.repeats)]
        if not self.heldout:
            return values, None
        return values, [await self.one(label, index, True) for index in range(self.repeats)]


async def _interleaved(name: str, sandbox: Sandbox, score: _Scorer, solutions: AnchorSolutions) -> AnchorSamples:
    from rebench.scoring.rescore import restore_layers

    samples = AnchorSamples(start=[], reference=[], heldout_start=[] if score.heldout else None,
                            heldout_reference=[] if score.heldout else None)
    for index in range(score.repeats):
        for label, layers, values, heldout in (
                ("starting", solutions.start, samples.start, samples.heldout_start),
                ("reference", solutions.reference, samples.reference, samples.heldout_reference)):
            error = await restore_layers(sandbox, [Path(layer) for layer in layers])
            if error is not None:
                raise RebenchError(f"calibration of {name!r}: {error}")
            values.append(await score.one(label, index, False))
            if heldout is not None:  # right after, on the same restored solution
                heldout.append(await score.one(label, index, True))
    return samples


@asynccontextmanager
async def scoring_sandbox(env: Environment, profile: str, backend: str
                          ) -> AsyncIterator[tuple[Sandbox, AttemptGateway | None]]:
    """A fresh sandbox with the environment installed and, where the profile has one, an
    unmetered gateway (the scorer may call the environment's model): scoring outside an attempt
    (calibration, noise, tests) takes the same path an attempt's scores take. Both are stopped
    on the way out. Pass the gateway to run_scoring for its per-call tokens."""
    from rebench.environments.build import assets_dir
    from rebench.environments.install import install_environment
    from rebench.gateway.attempt import AttemptGateway
    from rebench.sandbox.base import SandboxSpec
    from rebench.sandboxes import create_sandbox

    spec_profile = env.profile(profile)
    spec = SandboxSpec(attempt_id=0, environment=env.name, profile=profile,
                       cpus=spec_profile.resources.cpus, memory_gb=spec_profile.resources.memory_gb)
    gateway = AttemptGateway.unmetered(env, profile, backend)
    if gateway is not None:
        spec = gateway.sandbox_spec(spec)
    sandbox = create_sandbox(backend, spec, env)
    await sandbox.start()
    try:
        await install_environment(sandbox, env, profile, assets_dir(env, profile, build=False))
        if gateway is not None:
            await gateway.start()
            await gateway.install(sandbox)
        yield sandbox, gateway
    finally:
        await sandbox.stop()
        if gateway is not None:
            await gateway.close()


def calibration_repeats(env: Environment, profile: str, requested: int | None = None) -> int:
    """How many times each solution is scored: as asked, else as many as the final rule
    re-scores a solution (`rescore.repeats` under rescore_best), else 3."""
    if requested is not None:
        return requested
    spec = env.profile(profile)
    return spec.rescore.repeats if spec.final_score == "rescore_best" else 3


async def load_reference(sandbox: Sandbox, env: Environment, log: Callable[[str], None]) -> None:
    """Put the reference solution in the sandbox's solution folder and run its run.sh, if any."""
    if env.reference_dir is None:
        raise RebenchError(f"environment {env.name!r} has no reference/ folder to measure")
    await sandbox.copy_in(str(env.reference_dir), sandbox.paths.solution, user="agent")
    if (env.reference_dir / "run.sh").is_file():
        log("running the reference solution's run.sh")
        ran = await sandbox.exec("bash run.sh", user="agent", timeout=3 * 3600)
        if not ran.ok:
            raise RebenchError(f"reference run.sh of {env.name!r} failed: {ran.stderr.strip()[-300:]}")


def save_calibration(store: Store, env: Environment, profile: str,
                     start: list[float | None], reference: list[float | None], *,
                     heldout_start: list[float | None] | None = None,
                     heldout_reference: list[float | None] | None = None) -> Calibration:
    """Store one anchor per solution, by the profile's final rule, so both ends of the scale are
    measured as attempts are judged: under RE-Bench's rules the best run (a busy machine only
    ever slows a run down, and attempts are judged by their best score call); under
    `rescore_best` the median (attempts are judged by the median of re-scores,
    rebench.scoring.rescore). Held-out samples, where measured, give the held-out split's anchors
    by the same rule. Any invalid run means the environment is broken here, not a noisy run."""
    heldout = None if heldout_start is None or heldout_reference is None else (heldout_start, heldout_reference)
    measured = [("starting", start), ("reference", reference)]
    if heldout is not None:
        measured += [("held-out starting", heldout[0]), ("held-out reference", heldout[1])]
    for label, values in measured:
        if not values or any(v is None for v in values):
            raise RebenchError(f"calibration of {env.name!r}: the {label} solution did not score validly: {values}")
    spec = env.profile(profile)
    rule = spec.final_score
    pick = ((lambda values: rescore_median(values, spec.direction)) if rule == "rescore_best"
            else (lambda values: final_raw_score(values, rule="best", direction=spec.direction)))
    hardware = hardware_fingerprint()
    start_raw, reference_raw = pick(start), pick(reference)
    assert start_raw is not None and reference_raw is not None  # every run is valid (checked above)
    row = Calibration(
        environment=env.name, env_version=env.version, profile=profile, hardware=hardware.key,
        hardware_description=hardware.description,
        start_raw=start_raw,
        reference_raw=reference_raw,
        heldout_start_raw=pick(heldout[0]) if heldout is not None else None,
        heldout_reference_raw=pick(heldout[1]) if heldout is not None else None,
        samples={"start": start, "reference": reference, "rule": "median" if rule == "rescore_best" else "best",
                 **({"heldout_start": heldout[0], "heldout_reference": heldout[1]} if heldout is not None else {})},
    )
    for split, low, high in (("", row.start_raw, row.reference_raw),
                             ("held-out ", row.heldout_start_raw, row.heldout_reference_raw)):
        if low is not None and low == high:
            raise RebenchError(f"calibration of {env.name!r}: {split}starting and reference scores are equal ({low})")
    with store.session() as session:
        session.add(row)
    return row
