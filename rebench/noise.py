"""Scoring noise: how far an environment's score moves on this machine when the solution does not change.

`rebench envs noise` scores the starting solution and the reference solution n times each in one
sandbox and stores the spread of the raw scores, in raw and in normalized units, beside the figure
RE-Bench printed (the standard deviation of the starting score, paper Table 6). Noise matters
because an attempt's best score counts: on a noisy timing environment an agent that only
re-scores the unchanged start banks the noise.

The starting solution is also measured under the profile's final rule. For
`final_score = "rescore_best"` an unchanged solution's final raw score is the median of
`rescore.repeats` scoring calls, so each final-rule sample is such a median; for `best` or
`last` the final score of an unchanged solution is one call. The normalized unit is the gap
between the two solutions' mean raw scores measured here, the scale normalization has on this
machine once its anchors are calibrated (declared anchors may come from other hardware).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, Field
from sqlalchemy import select

from rebench.calibration import HardwareFingerprint, hardware_fingerprint
from rebench.environments.metadata import Profile
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.store.db import Store
from rebench.store.measurements import NoiseMeasurement
from rebench.store.models import utcnow

MIN_N = 2
MAX_N = 100
MAX_REPEATS = 50

PAPER_START_SD: dict[str, float] = {
    "ai_rd_small_scaling_law": 0.004,
    "ai_rd_triton_cumsum": 0.005,
    "ai_rd_fix_embedding": 0.0,
    "ai_rd_rust_codecontests_inference": 0.0,
    "ai_rd_restricted_mlm": 0.02,
    "ai_rd_optimize_llm_foundry": 0.08,
    "ai_rd_nanogpt_chat_rl": 0.62,
}
"""RE-Bench's "SD of starting score" per METR task family (paper v1 Table 6 = v2 Table 4), measured
on the paper's hardware; the table gives no unit, and it is compared here with the normalized sd."""


def paper_start_sd(env: Environment) -> float | None:
    """The paper's figure for this environment, None when it is not a RE-Bench environment."""
    family = env.metadata.metr_task_family
    return PAPER_START_SD.get(family) if family else None


def check_n(n: int) -> None:
    if not MIN_N <= n <= MAX_N:
        raise RebenchError(f"invalid -n {n}: must be between {MIN_N} and {MAX_N} (a standard deviation "
                           "needs at least two scores)")


def final_rule_repeats(profile: Profile, override: int | None = None) -> int:
    """Scoring calls behind one final-rule score of an unchanged solution: the profile's
    re-score repeats under "rescore_best", one call under "best" or "last". `override` measures
    what re-scoring with that many calls would give, whatever the profile says."""
    if override is not None:
        if not 1 <= override <= MAX_REPEATS:
            raise RebenchError(f"invalid --rescore-repeats {override}: must be between 1 and {MAX_REPEATS}")
        return override
    return profile.rescore.repeats if profile.final_score == "rescore_best" else 1


class NoiseSamples(BaseModel):
    """Raw scores as measured: the start in n groups of `repeats` calls (one final-rule score each),
    the reference in n single calls; None is an invalid score. `seconds` is each call's wall time."""

    start: list[list[float | None]]
    reference: list[float | None]
    seconds: list[float] = Field(default_factory=list)


class NoiseSummary(BaseModel):
    """One measurement, as stored in `noise_measurements` and printed by `envs noise` and `envs show`."""

    environment: str
    env_version: str
    profile: str
    hardware: str
    hardware_description: str
    n: int
    final_rule: str = Field(description="the profile's final_score")
    repeats: int = Field(description="scoring calls behind one final-rule score of the start")
    start_calls: int
    start_mean: float
    start_sd: float
    reference_mean: float
    reference_sd: float
    scale: float = Field(description="|reference mean - start mean|: one normalized unit in raw units")
    start_sd_normalized: float
    reference_sd_normalized: float
    final_start_mean: float
    final_start_sd: float
    final_start_sd_normalized: float
    paper_start_sd: float | None
    seconds_per_call: float
    created_at: datetime | None = None


def _valid(label: str, env: Environment, values: list[float | None]) -> list[float]:
    if any(v is None for v in values):
        raise RebenchError(f"noise of {env.name!r}: the {label} solution did not score validly "
                           f"({sum(v is None for v in values)} of {len(values)} calls invalid): {values}")
    return [v for v in values if v is not None]


def summarize(env: Environment, profile: str, samples: NoiseSamples,
              hardware: HardwareFingerprint | None = None) -> NoiseSummary:
    """The figures of one measurement. Every start call counts for the single-call spread;
    each group's median is one final-rule score."""
    if len(samples.start) < MIN_N or len(samples.reference) < MIN_N or not all(samples.start):
        raise RebenchError(f"noise of {env.name!r}: at least {MIN_N} scores of each solution are needed")
    start = _valid("starting", env, [v for group in samples.start for v in group])
    reference = _valid("reference", env, samples.reference)
    finals = [statistics.median(_valid("starting", env, group)) for group in samples.start]
    scale = abs(statistics.fmean(reference) - statistics.fmean(start))
    if scale == 0:
        raise RebenchError(f"noise of {env.name!r}: the starting and reference solutions score the same on "
                           f"average ({statistics.fmean(start)}), so there is no normalized unit")
    hardware = hardware or hardware_fingerprint()
    start_sd, reference_sd, final_sd = statistics.stdev(start), statistics.stdev(reference), statistics.stdev(finals)
    return NoiseSummary(
        environment=env.name, env_version=env.version, profile=profile, hardware=hardware.key,
        hardware_description=hardware.description, n=len(samples.start),
        final_rule=env.profile(profile).final_score, repeats=len(samples.start[0]), start_calls=len(start),
        start_mean=statistics.fmean(start), start_sd=start_sd,
        reference_mean=statistics.fmean(reference), reference_sd=reference_sd, scale=scale,
        start_sd_normalized=start_sd / scale, reference_sd_normalized=reference_sd / scale,
        final_start_mean=statistics.fmean(finals), final_start_sd=final_sd, final_start_sd_normalized=final_sd / scale,
        paper_start_sd=paper_start_sd(env),
        seconds_per_call=statistics.fmean(samples.seconds) if samples.seconds else 0.0,
    )


async def sample_noise(env: Environment, profile: str, *, backend: str, n: int, repeats: int,
                       log: Callable[[str], None]) -> NoiseSamples:
    """Score the starting solution n x `repeats` times, then the reference n times, in one fresh
    sandbox (the path an attempt's scores take)."""
    from rebench.calibration import load_reference, scoring_sandbox
    from rebench.sandbox.base import Sandbox
    from rebench.scoring.run import run_scoring

    timeout_s = env.profile(profile).score_timeout_s
    seconds: list[float] = []
    async with scoring_sandbox(env, profile, backend) as (sandbox, gateway):

        async def score(box: Sandbox, label: str) -> float | None:
            began = time.monotonic()
            result = await run_scoring(box, timeout_s, gateway)
            seconds.append(time.monotonic() - began)
            log(f"{label}: {result.raw} ({seconds[-1]:.1f} s)")
            return result.raw

        start = [[await score(sandbox, f"starting solution, sample {i + 1}/{n}, call {j + 1}/{repeats}")
                  for j in range(repeats)] for i in range(n)]
        await load_reference(sandbox, env, log)
        reference = [await score(sandbox, f"reference solution, sample {i + 1}/{n}") for i in range(n)]
    return NoiseSamples(start=start, reference=reference, seconds=seconds)


def save_noise(store: Store, summary: NoiseSummary, samples: NoiseSamples) -> NoiseSummary:
    """One row, written in one transaction; returns the summary with its time."""
    created = utcnow()
    row = NoiseMeasurement(
        created_at=created,
        environment=summary.environment, env_version=summary.env_version, profile=summary.profile,
        hardware=summary.hardware, hardware_description=summary.hardware_description, n=summary.n,
        start_mean=summary.start_mean, start_sd=summary.start_sd, reference_mean=summary.reference_mean,
        reference_sd=summary.reference_sd, start_sd_normalized=summary.start_sd_normalized,
        final_start_sd_normalized=summary.final_start_sd_normalized,
        summary=summary.model_dump(mode="json", exclude={"created_at"}), samples=samples.model_dump(mode="json"),
    )
    with store.session() as session:
        session.add(row)
    return summary.model_copy(update={"created_at": created})


def latest_noise(store: Store | None, env: Environment, profile: str,
                 hardware: str | None = None) -> NoiseSummary | None:
    """The newest measurement of this environment version and profile on this hardware (None without a store)."""
    if store is None:
        return None
    key = hardware or hardware_fingerprint().key
    with store.session() as session:
        row = session.scalars(
            select(NoiseMeasurement)
            .where(NoiseMeasurement.environment == env.name, NoiseMeasurement.env_version == env.version,
                   NoiseMeasurement.profile == profile, NoiseMeasurement.hardware == key)
            .order_by(NoiseMeasurement.id.desc())
        ).first()
        if row is None:
            return None
        created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)  # SQLite drops it
        return NoiseSummary.model_validate({**row.summary, "created_at": created})
