"""rebench as a library: what `rebench run`, `envs build|calibrate|noise|show`, `report` and `import` do.

The command line is a thin shell over these functions: it parses options, calls one of
them and prints what comes back. Scripts, notebooks and tests call them directly:

    from rebench import api
    from rebench.agents.base import AgentConfig

    spec = api.CampaignSpec(environments=["triton_cumsum"], agent=AgentConfig(name="reference"),
                            budget_s="10m", k=2, backend="local")
    result = api.run_campaign(spec, db="results/rebench.db")
    print(result.campaign_id, [o.status for o in result.outcomes])

One campaign, in the order `run_campaign` does it:

    1. validate     environments, profile, what the profile needs here (GPUs, operator assets:
                    rebench.preflight), agent (and its script), model key, backend:
                    a RebenchError here, before anything is built or written
    2. build        each environment's virtualenv and assets (and image on docker), cached by content hash
    3. recover      attempts left `running` by a harness that died are marked `interrupted`
    4. calibrate    timing environments on hardware without calibrated anchors: measure them first
    5. plan         the campaign row and all its queued attempt rows, in one transaction (`resume`:
                    the campaign's interrupted tries re-queued instead, rebench.scheduler.resume)
    6. run          CampaignRunner (rebench/campaign.py) leases CPU slots and GPUs (durable leases and
                    the backfill queue of rebench.scheduler; docs/scheduling.md) and retries an
                    infrastructure failure once; each attempt is AttemptRunner.run (rebench/runner.py):
                    sandbox -> install -> baseline score (paused) -> agent under the hard timer
                    -> snapshot -> [re-score the best solutions, final_score = "rescore_best"]
                    -> final score -> final attempt row

Long calls say what they are doing through an `Observer` (callbacks, all optional).
Every function that takes `db` accepts an open `Store`, a path, or None for the
default database (`$REBENCH_DB` or results/rebench.db); a store opened here is closed here.
Results as pandas DataFrames are in `rebench.analysis`.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from rebench.agents.base import AgentConfig
from rebench.campaign import CampaignSpec
from rebench.runner import AttemptOutcome

if TYPE_CHECKING:
    from rebench.calibration import ResolvedAnchors
    from rebench.campaign import CampaignRunner
    from rebench.environments.registry import Environment
    from rebench.human.service import HumanAttemptInfo, HumanStart
    from rebench.noise import NoiseSummary
    from rebench.report.compute import Report
    from rebench.report.importer import ImportSummary
    from rebench.runner import AttemptRunner
    from rebench.store.db import Store

__all__ = [
    "AgentConfig",
    "AttemptOutcome",
    "CalibrationResult",
    "CampaignResult",
    "CampaignSpec",
    "Observer",
    "PlannedCampaign",
    "anchors_in_use",
    "attach_human",
    "build_environment",
    "calibrate",
    "choose_backend",
    "human_attempts",
    "import_metr_runs",
    "measure_noise",
    "noise_measured",
    "open_store",
    "report",
    "resume_campaign",
    "run_campaign",
    "start_human",
    "stop_human",
    "using_store",
]

def _ignore(*_args: object) -> None:
    return None


@dataclass
class Observer:
    """Callbacks a long call makes while it works; the CLI prints them, a script may leave them out."""

    warning: Callable[[str], None] = _ignore
    """Something that changes what the results mean (no Docker engine, scoring unconfined)."""
    note: Callable[[str], None] = _ignore
    """Something worth knowing that changes nothing (the local backend does not isolate)."""
    log: Callable[[str], None] = _ignore
    """Progress of builds, orphan recovery and calibration runs."""
    calibrated: Callable[[CalibrationResult], None] = _ignore
    planned: Callable[[PlannedCampaign], None] = _ignore
    """The campaign and its attempt rows are written; attempts start next."""
    progress: Callable[[int, str], None] = _ignore
    """(attempt id, what it is doing now)."""
    finished: Callable[[AttemptOutcome], None] = _ignore
    """One attempt (or its retry) ended."""


class CalibrationResult(BaseModel):
    """Anchors measured on this machine and stored; normalization uses them from now on."""

    environment: str
    env_version: str
    profile: str
    hardware: str = Field(description="hardware key the anchors are stored under")
    hardware_description: str
    start_raw: float
    reference_raw: float

    def summary(self) -> str:
        return (f"calibrated {self.environment} ({self.profile}) on {self.hardware_description}: "
                f"start {self.start_raw:.4f}, reference {self.reference_raw:.4f} (hardware key {self.hardware})")


class PlannedCampaign(BaseModel):
    """A campaign whose rows are written: its id, its queued attempts, and the spec with the backend chosen."""

    campaign_id: int
    attempt_ids: list[int]
    spec: CampaignSpec


class CampaignResult(PlannedCampaign):
    """A finished campaign. `outcomes` has one entry per attempt run, retries included, by attempt id."""

    outcomes: list[AttemptOutcome]
    warnings: list[str] = Field(default_factory=list, description="what Observer.warning was told")
    db: Path


def open_store(db: Store | Path | str | None = None) -> Store:
    """The database at `db` (created and migrated when new); None: $REBENCH_DB or results/rebench.db."""
    from rebench.store.db import Store

    return db if isinstance(db, Store) else Store(db)


@contextmanager
def using_store(db: Store | Path | str | None, *, read_only: bool = False) -> Iterator[Store]:
    """A store for one call: one passed in stays open, one opened here is closed here (read-only
    for calls that only read: they never create or upgrade a database)."""
    from rebench.store.db import Store

    if isinstance(db, Store):
        yield db
        return
    store = Store(db, read_only=read_only)
    try:
        yield store
    finally:
        store.close()


def _check_database(db: Store | Path | str | None) -> None:
    """A database this rebench must not touch (newer, damaged, foreign) is refused before minutes of building."""
    from rebench.errors import RebenchError
    from rebench.store.db import Store, default_db_path
    from rebench.store.schema import inspect_file

    if not isinstance(db, Store):
        problem = inspect_file(Path(db) if db is not None else default_db_path()).problem()
        if problem:
            raise RebenchError(problem)


@contextmanager
def _store_if_any(db: Store | Path | str | None) -> Iterator[Store | None]:
    """For what the declarations answer without a database: a read-only store, or None when the
    database does not exist yet (nothing is measured, and nothing is created by asking)."""
    from rebench.store.db import Store, default_db_path

    if not isinstance(db, Store) and not (Path(db) if db is not None else default_db_path()).exists():
        yield None
        return
    with using_store(db, read_only=True) as store:
        yield store


def _environment(environment: str | Environment, profile: str) -> Environment:
    """The environment by name (or as given), checked to have `profile`."""
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    env.profile(profile)
    return env


def choose_backend(requested: str | None, observer: Observer | None = None) -> str:
    """`local` or `docker`; None picks docker when an engine answers, and warns when it falls back."""
    from rebench.sandbox.factory import resolve_backend

    chosen, warning = resolve_backend(requested)
    if warning:
        (observer or Observer()).warning(warning)
    return chosen


def build_environment(environment: str | Environment, profile: str = "tiny", backend: str | None = None, *,
                      observer: Observer | None = None, assets: Mapping[str, Path] | None = None) -> str:
    """Build what an attempt on this backend needs (virtualenv, assets, and the image on docker);
    a no-op when it is cached. Returns the backend it built for. `assets`: where the operator's
    files that the profile declares are (else the assets settings file; see
    rebench.environments.assets)."""
    from rebench.preflight import check

    env = _environment(environment, profile)
    check(env, profile, "build", assets=assets)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    _build(env, profile, chosen, observer, assets)
    return chosen


def _build(env: Environment, profile: str, backend: str, observer: Observer,
           assets: Mapping[str, Path] | None = None) -> None:
    from rebench.environments.build import assets_dir, local_python

    assets_dir(env, profile, log=observer.log, assets=assets)
    local_python(env, profile, log=observer.log)
    if backend == "docker":
        from rebench.images import build_environment_image  # the docker SDK: only for the docker backend

        build_environment_image(env, profile, log=observer.log, assets=assets)


def calibrate(environment: str | Environment, profile: str = "tiny", backend: str | None = "local",
              repeats: int | None = None, *, db: Store | Path | str | None = None, build: bool = True,
              observer: Observer | None = None) -> CalibrationResult:
    """Score the starting and the reference solution `repeats` times each on this machine and store
    the best of each (the median under rescore_best) as this hardware's anchors (see
    rebench.calibration for why). None: as many as the profile's final rule re-scores, else 3."""
    from rebench.errors import RebenchError

    if repeats is not None and repeats < 1:
        raise RebenchError(f"invalid --repeats {repeats}: must be at least 1")
    from rebench.preflight import check

    env = _environment(environment, profile)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    check(env, profile, "calibrate", backend=chosen)
    if build:
        _build(env, profile, chosen, observer)
    with using_store(db) as store:
        return _calibrate(store, env, profile, chosen, repeats, observer)


def _calibrate(store: Store, env: Environment, profile: str, backend: str, repeats: int | None,
               observer: Observer) -> CalibrationResult:
    from rebench.calibration import calibration_repeats, measure_anchors, save_calibration

    start, reference = asyncio.run(measure_anchors(env, profile, backend=backend,
                                                   repeats=calibration_repeats(env, profile, repeats),
                                                   log=observer.log))
    row = save_calibration(store, env, profile, start, reference)
    result = CalibrationResult(environment=env.name, env_version=env.version, profile=profile,
                               hardware=row.hardware, hardware_description=row.hardware_description,
                               start_raw=row.start_raw, reference_raw=row.reference_raw)
    observer.calibrated(result)
    return result


def anchors_in_use(environment: str | Environment, db: Store | Path | str | None = None) -> dict[str, ResolvedAnchors]:
    """Per profile, the anchors normalization uses on this machine: calibrated here, else declared."""
    from rebench.calibration import resolve_anchors
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    with _store_if_any(db) as store:
        return {name: resolve_anchors(store, env, name) for name in env.metadata.profiles}


def measure_noise(environment: str | Environment, profile: str = "tiny", backend: str | None = "local",
                  n: int = 10, *, rescore_repeats: int | None = None, db: Store | Path | str | None = None,
                  build: bool = True, observer: Observer | None = None) -> NoiseSummary:
    """Score the starting and the reference solution n times each on this machine (the start also
    under the profile's final rule, see rebench.noise) and store the spread; nothing is stored
    when a call scores invalidly. `rescore_repeats` measures the start as if the profile
    re-scored it with that many calls."""
    from rebench.noise import check_n, final_rule_repeats, sample_noise, save_noise, summarize

    check_n(n)
    env = _environment(environment, profile)
    repeats = final_rule_repeats(env.profile(profile), rescore_repeats)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    if build:
        _build(env, profile, chosen, observer)
    with using_store(db) as store:  # opened first: a bad --db fails before minutes of scoring
        samples = asyncio.run(sample_noise(env, profile, backend=chosen, n=n, repeats=repeats, log=observer.log))
        return save_noise(store, summarize(env, profile, samples), samples)


def noise_measured(environment: str | Environment,
                   db: Store | Path | str | None = None) -> dict[str, NoiseSummary | None]:
    """Per profile, the newest noise measurement on this machine (None: not measured here)."""
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.noise import latest_noise

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    with _store_if_any(db) as store:
        return {name: latest_noise(store, env, name) for name in env.metadata.profiles}


def _check_agent(config: AgentConfig, backend: str) -> None:
    """A bad agent name or script, or a model without its key or SDK, fails before any sandbox starts;
    so does an installed agent on a backend it cannot run in."""
    from rebench.agents.registry import load_agent
    from rebench.models import check_model_available

    agent = load_agent(config)
    check_model_available(config)
    check = getattr(agent, "check", None)
    if check is not None:
        check(backend)


def _engine_disk_warning() -> str | None:
    from rebench.images.gc import engine_disk_warning
    from rebench.sandbox.docker import DockerEngine

    return engine_disk_warning(DockerEngine.connect())


def _confinement_warning() -> str | None:
    from rebench.scoring.score_helper import confinement_unavailable

    unconfined = confinement_unavailable()
    if not unconfined:
        return None
    return (f"{unconfined}: submitted code will run unconfined while it is scored and could read held-out data "
            "(needs Linux 5.13+ with Landlock enabled)")


def _check_network(spec: CampaignSpec, envs: Sequence[Environment]) -> None:
    """`--network` must name a policy the backend enforces (the local backend enforces none: its
    commands have the host's network), and this host must be able to enforce each attempt's policy."""
    from rebench.errors import RebenchError
    from rebench.network import effective_network
    from rebench.sandbox.factory import load_backend

    name = spec.chosen_backend
    backend = load_backend(name)
    if spec.network is not None and spec.network not in backend.networks:
        offered = (f"it offers --network {' or '.join(sorted(backend.networks))}" if backend.networks else
                   "it controls no network: its commands have the host's, whatever is asked")
        raise RebenchError(f"invalid --network {spec.network} with --backend {name}: {offered}; "
                           "use --backend docker, or leave --network out")
    if spec.executor == "ray":
        return  # the sandboxes start on the cluster's nodes, which refuse at start what they cannot keep
    for policy in sorted({effective_network(spec.network, env.profile(spec.profile).network) for env in envs}):
        if policy in backend.networks:
            backend.check_network(policy)


def run_campaign(spec: CampaignSpec, *, db: Store | Path | str | None = None, calibrate: bool = True,
                 observer: Observer | None = None, cancel_on_sigterm: bool = False,
                 resume: int | None = None) -> CampaignResult:
    """Run a whole campaign (the steps are in this module's docstring) and return its outcomes.

    Bad input raises RebenchError before any row is written. `calibrate=False` normalizes
    timing scores with the declared anchors where this machine has no calibration.
    `cancel_on_sigterm` (main thread only) treats SIGTERM like Ctrl-C: every running attempt
    is marked interrupted and its sandbox stopped, then KeyboardInterrupt is raised.
    `resume`: go on with that campaign (its spec is `spec`) instead of planning a new one.
    """
    from rebench import preflight
    from rebench.calibration import resolve_anchors
    from rebench.campaign import CampaignRunner, apply_env_params, plan_campaign, recover_orphans
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.errors import RebenchError
    from rebench.gateway import check_gateway
    from rebench.sandbox.local import LOCAL_WARNING

    warnings: list[str] = []
    outer = observer or Observer()

    def warn(message: str) -> None:
        warnings.append(message)
        outer.warning(message)

    observer = replace(outer, warning=warn)

    # 1. validate: nothing is built or written before the database, every name, the agent and the model check out
    # a spec changed with model_copy skipped its validators
    spec = CampaignSpec.model_validate(spec.model_dump(warnings=False))
    _check_database(db)
    registry = EnvironmentRegistry()
    envs = [_environment(registry.get(name), spec.profile) for name in spec.environments]
    spec = spec.model_copy(update={"backend": choose_backend(spec.backend, observer)})
    for agent in spec.agents:
        _check_agent(agent, spec.chosen_backend)
    if spec.gpus and all(env.profile(spec.profile).resources.gpus == 0 for env in envs):
        raise RebenchError(f"--gpus {','.join(map(str, spec.gpus))}: the {spec.profile} profile of "
                           f"{', '.join(env.name for env in envs)} needs no GPU; leave --gpus out")
    _check_network(spec, envs)
    for env in envs:
        apply_env_params(env, spec.profile, spec.env_params)
        check_gateway(env.profile(spec.profile).gateway)
        preflight.check(env, spec.profile, "run", gpus=spec.gpus, backend=spec.chosen_backend,
                        cluster=spec.executor == "ray")
    if spec.executor == "ray":  # join the cluster now: an unreachable one fails here, before any row
        from rebench.scheduler.ray_connect import DEFAULT_TIMEOUT_S
        from rebench.scheduler.ray_executor import connect

        connect(spec.ray_address, spec.ray_timeout_s or DEFAULT_TIMEOUT_S)
    if spec.chosen_backend == "local":
        observer.note(LOCAL_WARNING)
    unconfined = _confinement_warning()
    if unconfined:
        observer.warning(unconfined)
    if spec.chosen_backend == "docker":
        full_disk = _engine_disk_warning()
        if full_disk:
            observer.warning(full_disk)
    # 2. build
    for env in envs:
        _build(env, spec.profile, spec.chosen_backend, observer)
    with using_store(db) as store:
        # 3. recover attempts of a harness that died
        orphans = recover_orphans(store)
        if orphans:
            observer.log(f"marked {orphans} attempt(s) of a dead harness process as interrupted")
        # 4. calibrate timing environments this hardware has not measured
        for env in envs:
            needs = env.profile(spec.profile).hardware_dependent
            if calibrate and needs and resolve_anchors(store, env, spec.profile).kind == "declared":
                observer.log(f"{env.name} scores are timings and this machine has no calibration: "
                             "measuring the starting and reference solutions first")
                _calibrate(store, env, spec.profile, spec.chosen_backend, None, observer)
        # 5. plan: the campaign and its attempt rows, all at once
        if resume is None:
            campaign_id, attempt_ids = plan_campaign(store, spec, registry)
        else:  # rebench.scheduler.resume: interrupted tries re-queued, queued ones kept
            from rebench.scheduler.resume import prepare_resume

            campaign_id, attempt_ids = resume, prepare_resume(store, resume)
        observer.planned(PlannedCampaign(campaign_id=campaign_id, attempt_ids=attempt_ids, spec=spec))
        # 6. run every attempt (rebench/campaign.py, then rebench/runner.py for each one)
        runner = CampaignRunner(store, registry, snapshots_dir=store.snapshots_dir,
                                progress=observer.progress, on_outcome=observer.finished,
                                attempt_runner=_attempt_runner(spec))
        outcomes = asyncio.run(_run(runner, campaign_id, spec, cancel_on_sigterm))
        return CampaignResult(campaign_id=campaign_id, attempt_ids=attempt_ids, spec=spec,
                              outcomes=sorted(outcomes, key=lambda o: o.attempt_id), warnings=warnings,
                              db=store.path)


def _attempt_runner(spec: CampaignSpec) -> type[AttemptRunner]:
    """AttemptRunner, or on `--executor ray` the one that runs each attempt as a Ray task."""
    from rebench.runner import AttemptRunner

    if spec.executor != "ray":
        return AttemptRunner
    from rebench.scheduler.ray_executor import ray_runner

    return ray_runner(spec.ray_address)


def resume_campaign(campaign_id: int, *, db: Store | Path | str | None = None, calibrate: bool = True,
                    observer: Observer | None = None, cancel_on_sigterm: bool = False) -> CampaignResult:
    """Go on with a campaign whose harness died or was stopped (rebench.scheduler.resume): its
    finished attempts stay, interrupted ones are re-run as uncounted tries' retries, queued ones run."""
    from rebench.scheduler.resume import campaign_spec, check_resumable

    with using_store(db, read_only=True) as reading:
        check_resumable(reading, campaign_id)
    with using_store(db) as store:
        spec = CampaignSpec.model_validate(campaign_spec(store, campaign_id))
        return run_campaign(spec, db=store, calibrate=calibrate, observer=observer,
                            cancel_on_sigterm=cancel_on_sigterm, resume=campaign_id)


async def _run(runner: CampaignRunner, campaign_id: int, spec: CampaignSpec,
               cancel_on_sigterm: bool) -> list[AttemptOutcome]:
    """With `cancel_on_sigterm`, SIGTERM cancels like Ctrl-C: each attempt marks itself interrupted and
    cleans up, then KeyboardInterrupt is raised (as for Ctrl-C), not a bare CancelledError."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    terminated: list[bool] = []

    def terminate() -> None:
        terminated.append(True)
        if task is not None:
            task.cancel()

    if cancel_on_sigterm:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await runner.run(campaign_id, spec)
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt("terminated (SIGTERM)") from None
        raise
    finally:
        if cancel_on_sigterm:
            loop.remove_signal_handler(signal.SIGTERM)


def report(db: Store | Path | str | None = None, *, campaigns: Sequence[int] = (),
           environments: Sequence[str] = (), agents: Sequence[str] = (), source: str | None = None,
           estimator: str = "expected_max", n_bootstrap: int | None = None, seed: int | None = None,
           budgets: str | Sequence[str] = "30m,2h,8h,16h,32h", at: str = "8h",
           exclude_above: float | None = None, strict: bool = False) -> Report | None:
    """Score@k per agent and total time budget, with bootstrap intervals and the human comparison;
    None when no finished attempt matches the filters. Options are those of `rebench report`;
    `rebench.report.render` prints or writes the result, `rebench.analysis.score_at_k` makes it a DataFrame."""
    from rebench.report.bootstrap import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
    from rebench.report.data import Filters
    from rebench.report.service import make_report, settings_from_options

    filters = Filters(campaigns=campaigns, environments=environments, agents=agents, source=source)
    settings = settings_from_options(estimator, DEFAULT_N_BOOTSTRAP if n_bootstrap is None else n_bootstrap,
                                     DEFAULT_SEED if seed is None else seed, budgets, at, exclude_above,
                                     strict)
    with using_store(db, read_only=True) as store:
        return make_report(store, filters, settings)


def import_metr_runs(path: Path | str, *, db: Store | Path | str | None = None,
                     allow_empty: bool = False) -> ImportSummary:
    """Import the RE-Bench rows of METR's run-level export; runs already imported (by run id) are skipped.
    The whole file is validated before the database is opened, so a bad file writes nothing."""
    from rebench.report.importer import read_metr_runs, store_metr_runs

    export = read_metr_runs(Path(path), allow_empty=allow_empty)
    with using_store(db) as store:
        return store_metr_runs(store, export)


def start_human(environment: str, *, name: str, key: Path | str, profile: str = "tiny", budget: str = "8h",
                bind: str = "127.0.0.1", port: int = 0, gpus: Sequence[int] = (),
                db: Store | Path | str | None = None, foreground: bool = False) -> HumanStart:
    """Start a human expert attempt over SSH (rebench.human): every input is checked before a row is
    written; returns once the expert can connect (its `ssh_command`), with the attempt supervised by
    a detached process (`foreground`: by this one, returning when the attempt ended)."""
    from rebench.human.service import start_human as start

    with using_store(db) as store:
        return start(store, environment=environment, profile=profile, budget=budget, name=name, key=Path(key),
                     bind=bind, port=port, gpus=list(gpus), foreground=foreground)


def human_attempts(db: Store | Path | str | None = None) -> list[HumanAttemptInfo]:
    """Every human attempt: its state, working time used and left, and whether its supervisor runs."""
    from rebench.human.service import list_humans

    with using_store(db, read_only=True) as store:
        return list_humans(store)


def stop_human(attempt_id: int, reason: str | None = None, *, db: Store | Path | str | None = None) -> HumanAttemptInfo:
    """End a human attempt (status done, its work scored), reattaching first if its supervisor died."""
    from rebench.human.service import stop_human as stop

    with using_store(db) as store:
        return stop(store, attempt_id, reason)


def attach_human(attempt_id: int, *, db: Store | Path | str | None = None) -> HumanStart:
    """A new supervisor for a running human attempt whose supervisor died; returns once it serves again."""
    from rebench.human.service import attach_human as attach

    with using_store(db) as store:
        return attach(store, attempt_id)
