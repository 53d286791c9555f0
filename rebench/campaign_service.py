"""What `rebench run` does: one campaign from its spec to its outcomes, in the steps rebench.api's
docstring lists (validate, build, recover, calibrate, plan, run), and `--resume`. rebench.api re-exports
`run_campaign` and `resume_campaign`.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.campaign import CampaignSpec
from rebench.env_service import build_for_backend, calibrate_on, checked_environment, choose_backend
from rebench.observer import CampaignResult, Observer, PlannedCampaign
from rebench.store.opening import check_database, using_store

if TYPE_CHECKING:
    from rebench.campaign import CampaignRunner
    from rebench.environments.registry import Environment
    from rebench.runner import AttemptRunner
    from rebench.store.db import Store


def _check_agent(config: AgentConfig, backend: str) -> None:
    """A bad agent name or script, or a model without its key or SDK, fails before any sandbox starts;
    so does an installed agent on a backend it cannot run in."""
    from rebench.agents.registry import agent_problems

    problems = agent_problems(config, backend)
    if problems:
        raise problems[0]


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
    """Run a whole campaign (the steps are in rebench.api's docstring) and return its outcomes.

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
    from rebench.scheduler.queue import campaign_concurrency

    warnings: list[str] = []
    outer = observer or Observer()

    def warn(message: str) -> None:
        warnings.append(message)
        outer.warning(message)

    observer = replace(outer, warning=warn)

    # 1. validate: nothing is built or written before the database, every name, the agent and the model check out
    # a spec changed with model_copy skipped its validators
    spec = CampaignSpec.model_validate(spec.model_dump(warnings=False))
    check_database(db)
    registry = EnvironmentRegistry()
    envs = [checked_environment(registry.get(name), spec.profile) for name in spec.environments]
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

        cluster: dict[str, float] | None = connect(spec.ray_address, spec.ray_timeout_s or DEFAULT_TIMEOUT_S).resources
    else:
        cluster = None
    if spec.chosen_backend == "local":
        observer.note(LOCAL_WARNING)
    unconfined = _confinement_warning()
    if unconfined:
        observer.warning(unconfined)
    if spec.chosen_backend == "docker":
        full_disk = _engine_disk_warning()
        if full_disk:
            observer.warning(full_disk)
    # 2. build (with the run's --env-param values: build.py reads them too)
    for env in envs:
        built = apply_env_params(env, spec.profile, spec.env_params)[0]
        build_for_backend(built, spec.profile, spec.chosen_backend, observer)
    with using_store(db) as store:
        # 3. recover attempts of a harness that died
        orphans = recover_orphans(store)
        if orphans:
            observer.log(f"marked {orphans} attempt(s) of a dead harness process as interrupted")
        # 4. calibrate timing environments this hardware has not measured (on Ray, each node its own:
        # rebench.scheduler.ray_node_prep)
        for env in envs:
            needs = env.profile(spec.profile).hardware_dependent and spec.executor != "ray"
            if calibrate and needs and resolve_anchors(store, env, spec.profile).kind == "declared":
                observer.log(f"{env.name} scores are timings and this machine has no calibration: "
                             "measuring the starting and reference solutions first")
                calibrate_on(store, env, spec.profile, spec.chosen_backend, None, observer)
        # 5. plan: the campaign and its attempt rows, all at once
        if resume is None:
            campaign_id, attempt_ids = plan_campaign(store, spec, registry)
        else:  # rebench.scheduler.resume: interrupted tries re-queued, queued ones kept
            from rebench.scheduler.resume import prepare_resume

            campaign_id, attempt_ids = resume, prepare_resume(store, resume)
        concurrency = campaign_concurrency(store, registry, campaign_id, parallel=spec.parallel, gpus=spec.gpus,
                                           cluster=cluster)
        observer.planned(PlannedCampaign(campaign_id=campaign_id, attempt_ids=attempt_ids, spec=spec,
                                         concurrency=concurrency))
        # 6. run every attempt (rebench/campaign.py, then rebench/runner.py for each one)
        runner = CampaignRunner(store, registry, snapshots_dir=store.snapshots_dir,
                                progress=observer.progress, on_outcome=observer.finished,
                                attempt_runner=_attempt_runner(spec, calibrate))
        outcomes = asyncio.run(_run(runner, campaign_id, spec, cancel_on_sigterm))
        return CampaignResult(campaign_id=campaign_id, attempt_ids=attempt_ids, spec=spec, concurrency=concurrency,
                              outcomes=sorted(outcomes, key=lambda o: o.attempt_id), warnings=warnings,
                              db=store.path)


def _attempt_runner(spec: CampaignSpec, calibrate: bool) -> type[AttemptRunner]:
    """AttemptRunner, or on `--executor ray` the one that runs each attempt as a Ray task (whose node
    calibrates timing environments first, with `calibrate`)."""
    from rebench.runner import AttemptRunner

    if spec.executor != "ray":
        return AttemptRunner
    from rebench.scheduler.ray_executor import ray_runner

    return ray_runner(spec.ray_address, calibrate=calibrate)


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
