"""`rebench run`: plan a campaign, build what it needs, run it, print a summary."""

from __future__ import annotations

import asyncio
import importlib
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from rebench.budget import format_duration, parse_duration
from rebench.cli.common import DbOption, console, err_console, fmt, open_store
from rebench.errors import RebenchError
from rebench.tables import Col, print_table

if TYPE_CHECKING:  # the campaign machinery loads only when a campaign runs, not for `rebench run --help`
    from rebench.agents.base import AgentConfig
    from rebench.campaign import CampaignRunner, CampaignSpec
    from rebench.runner import AttemptOutcome


def _parse_agent_args(values: list[str]) -> dict[str, str]:
    parsed = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RebenchError(f"invalid --agent-arg {item!r}: use KEY=VALUE")
        parsed[key] = value
    return parsed


def _parse_gpus(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RebenchError(f"invalid --gpus {text!r}: use device ids like 0,1,2") from None


def _check_model(config: AgentConfig) -> None:
    """Fail before any sandbox starts when the model's provider key is missing."""
    if config.model is None:
        return
    try:
        models = importlib.import_module("rebench.models")
    except ImportError:
        return
    check = getattr(models, "check_model_available", None)
    if check is not None:
        check(config)


def run_command(
    env: Annotated[str, typer.Option("--env", "-e", help="Environment name(s), comma-separated.")],
    agent: Annotated[str, typer.Option("--agent", "-a", help="Agent name, e.g. reference, replay, modular.")],
    budget: Annotated[str, typer.Option("--budget", "-b", help="Working time per attempt: 90s, 30m, 2h, 1h30m.")],
    k: Annotated[int, typer.Option("-k", help="Attempts per environment (best-of-k).")] = 1,
    profile: Annotated[str, typer.Option("--profile", "-p", help="Environment profile: tiny or paper.")] = "tiny",
    backend: Annotated[str | None, typer.Option("--backend", help="local or docker (default: docker if an engine answers).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="provider/model for LLM agents.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Base URL for openai-compatible models.")] = None,
    agent_arg: Annotated[list[str] | None, typer.Option("--agent-arg", help="KEY=VALUE passed to the agent; repeatable.")] = None,
    token_limit: Annotated[int | None, typer.Option("--token-limit", min=1, help="Stop an attempt after this many tokens.")] = None,
    cost_limit: Annotated[float | None, typer.Option("--cost-limit", min=0.0, help="Stop an attempt after this many US dollars.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the first attempt; attempt i gets seed+i.")] = 0,
    parallel: Annotated[int, typer.Option("--parallel", min=1, help="Attempts to run at once.")] = 1,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU device ids the scheduler may lease, e.g. 0,1.")] = None,
    network: Annotated[bool | None, typer.Option("--network/--no-network", help="Override the environment's network setting.")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate/--no-calibrate", help="Measure anchors first where scores are timings and this machine has none.")] = True,
    db: DbOption = None,
) -> None:
    """Run k attempts of an agent on each environment under a time budget."""
    from rebench.agents.base import AgentConfig
    from rebench.agents.registry import load_agent
    from rebench.calibration import resolve_anchors
    from rebench.campaign import CampaignRunner, CampaignSpec, plan_campaign, recover_orphans
    from rebench.cli.envs import build_environment, calibrate_environment
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.sandbox.factory import resolve_backend
    from rebench.sandbox.local import LOCAL_WARNING
    from rebench.scoring.score_helper import confinement_unavailable

    if k < 1:
        raise RebenchError(f"invalid -k {k}: must be at least 1")
    budget_s = parse_duration(budget)
    names = [name.strip() for name in env.split(",") if name.strip()]
    if not names:
        raise RebenchError("--env needs at least one environment name")
    registry = EnvironmentRegistry()
    environments = [registry.get(name) for name in names]
    for environment in environments:
        environment.profile(profile)
    config = AgentConfig(name=agent, model=model, base_url=base_url, args=_parse_agent_args(agent_arg or []),
                         token_limit=token_limit, cost_limit_usd=cost_limit)
    load_agent(config)  # a bad agent name or script fails here, before anything is written
    _check_model(config)
    chosen, warning = resolve_backend(backend)
    if warning:
        err_console.print(f"[yellow]warning:[/] {warning}")
    if chosen == "local":
        err_console.print(f"[yellow]note:[/] {LOCAL_WARNING}")
    unconfined = confinement_unavailable()
    if unconfined:
        err_console.print(f"[yellow]warning:[/] {unconfined}: submitted code will run unconfined while it is "
                          "scored and could read held-out data (needs Linux 5.13+ with Landlock enabled)")
    spec = CampaignSpec(environments=names, agent=config, profile=profile, budget_s=budget_s, k=k,
                        backend=chosen, seed=seed, parallel=parallel, gpus=_parse_gpus(gpus), network=network)
    for environment in environments:
        build_environment(environment, profile, chosen)
    store = open_store(db)
    orphans = recover_orphans(store)
    if orphans:
        err_console.print(f"marked {orphans} attempt(s) of a dead harness process as interrupted")
    for environment in environments:
        needs = environment.profile(profile).hardware_dependent
        if calibrate and needs and resolve_anchors(store, environment, profile).kind == "declared":
            err_console.print(f"{environment.name} scores are timings and this machine has no calibration: "
                              "measuring the starting and reference solutions first")
            calibrate_environment(store, environment, profile, chosen)
    campaign_id, attempt_ids = plan_campaign(store, spec, registry)
    console.print(
        f"campaign {campaign_id}: {len(attempt_ids)} attempt(s) of [bold]{agent}[/] on {', '.join(names)} "
        f"({profile}, {format_duration(budget_s)} each, backend {chosen})"
    )

    def progress(attempt_id: int, message: str) -> None:
        console.print(f"  attempt {attempt_id}: {message}", highlight=False)

    def finished(outcome: AttemptOutcome) -> None:
        detail = f" ({outcome.limit_reason})" if outcome.limit_reason else ""
        if outcome.error_message:
            detail += f": {outcome.error_message}"
        console.print(f"  attempt {outcome.attempt_id}: [bold]{outcome.status}[/]{detail}, "
                      f"normalized {fmt(outcome.final_normalized)}", highlight=False)

    runner = CampaignRunner(store, registry, snapshots_dir=store.path.parent / "snapshots",
                            progress=progress, on_outcome=finished)
    outcomes = asyncio.run(_run_interruptible(runner, campaign_id, spec))
    _summary(outcomes)


async def _run_interruptible(runner: CampaignRunner, campaign_id: int, spec: CampaignSpec) -> list[AttemptOutcome]:
    """SIGTERM is handled like Ctrl-C: cancel, let each attempt mark itself interrupted and clean up."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await runner.run(campaign_id, spec)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _summary(outcomes: list[AttemptOutcome]) -> None:
    columns = [Col("attempt", key=True), Col("status", key=True), Col("final raw", justify="right"),
               Col("normalized", justify="right"), Col("working time", justify="right")]
    rows = [[str(o.attempt_id), o.status, fmt(o.final_raw, 4), fmt(o.final_normalized), format_duration(o.working_s)]
            for o in sorted(outcomes, key=lambda o: o.attempt_id)]
    print_table(console, "Attempts", columns, rows, more="`rebench attempts show ID`")


