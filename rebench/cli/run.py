"""`rebench run`: parse the options, call rebench.api.run_campaign, print progress and a summary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from rebench.agents.base import AgentConfig
from rebench.budget import format_duration
from rebench.cli.common import DbOption, console, fmt, observer
from rebench.errors import RebenchError
from rebench.tables import Col, print_table

if TYPE_CHECKING:  # the campaign machinery loads only when a campaign runs, not for `rebench run --help`
    from rebench.api import PlannedCampaign
    from rebench.attempt_outcome import AttemptOutcome
    from rebench.scheduler.view import CampaignLive


def _parse_pairs(values: list[str], option: str = "--agent-arg") -> dict[str, str]:
    parsed = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RebenchError(f"invalid {option} {item!r}: use KEY=VALUE")
        parsed[key] = value
    return parsed


def agent_configs(names: str, args: list[str], **common: Any) -> list[AgentConfig]:
    """One config per agent of `--agent a,b`. An unscoped `--agent-arg KEY=VALUE` goes to every agent,
    `NAME.KEY=VALUE` to agent NAME only (and wins over an unscoped KEY); a scope naming no agent of the
    run is a one-line error."""
    agents = [name.strip() for name in names.split(",") if name.strip()]
    if not agents:
        raise RebenchError(f"invalid --agent {names!r}: name at least one agent, e.g. modular or modular,aide")
    shared: dict[str, str] = {}
    scoped: dict[str, dict[str, str]] = {name: {} for name in agents}
    for key, value in _parse_pairs(args).items():
        scope, dot, rest = key.partition(".")
        if not dot:
            shared[key] = value
        elif scope in scoped and rest:
            scoped[scope][rest] = value
        else:
            raise RebenchError(f"invalid --agent-arg {key}={value!r}: {scope!r} is not an agent of this run "
                               f"(agents: {', '.join(agents)}); use NAME.KEY=VALUE with one of them, or KEY=VALUE")
    return [AgentConfig(name=name, args={**shared, **scoped[name]}, **common) for name in agents]


def run_command(
    env: Annotated[str | None, typer.Option("--env", "-e", help="Environment name(s), comma-separated.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Agent name(s), comma-separated, e.g. modular or modular,aide.")] = None,
    budget: Annotated[str | None, typer.Option("--budget", "-b", help="Working time per attempt: 90s, 30m, 2h, 1h30m.")] = None,
    k: Annotated[int, typer.Option("-k", help="Attempts per environment (best-of-k).")] = 1,
    profile: Annotated[str, typer.Option("--profile", "-p", help="Environment profile: tiny or paper.")] = "tiny",
    backend: Annotated[str | None, typer.Option("--backend", help="local or docker (default: docker if an engine answers).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="provider/model for LLM agents.")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Base URL for openai-compatible models.")] = None,
    agent_arg: Annotated[list[str] | None, typer.Option("--agent-arg", help="KEY=VALUE passed to every agent, or NAME.KEY=VALUE to agent NAME only; repeatable.")] = None,
    token_limit: Annotated[int | None, typer.Option("--token-limit", min=1, help="Stop an attempt after this many tokens.")] = None,
    cost_limit: Annotated[float | None, typer.Option("--cost-limit", min=0.0, help="Stop an attempt after this many US dollars.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the first attempt; attempt i gets seed+i.")] = 0,
    parallel: Annotated[int, typer.Option("--parallel", min=1, help="Attempts to run at once.")] = 1,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU device ids the scheduler may lease, e.g. 0,1, or all.")] = None,
    network: Annotated[str | None, typer.Option("--network", help="The sandboxes' network: none (default) or full (outside access as in RE-Bench, but not the host; docker backend only). Recorded on each attempt: results with and without network are not comparable.")] = None,
    final_rule: Annotated[str | None, typer.Option("--final-rule", help="How each attempt's final score is taken: best, last or rescore_best (re-score the best solutions when the attempt ends); default: the profile's.")] = None,
    env_param: Annotated[list[str] | None, typer.Option("--env-param", help="KEY=VALUE for the environment: credit=USD (the model gateway's credit) or a key of the profile's params; repeatable.")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate/--no-calibrate", help="Measure anchors first where scores are timings and this machine has none.")] = True,
    executor: Annotated[str, typer.Option("--executor", help="local (this host) or ray (Ray tasks on a cluster; pip install 'rebench\\[ray]').")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster to join (default: start Ray on this machine).")] = None,
    ray_timeout: Annotated[str | None, typer.Option("--ray-timeout", help="How long joining the Ray cluster may take, e.g. 30s (default); past it the run fails with nothing written.")] = None,
    progress_every: Annotated[str | None, typer.Option("--progress-every", help="In a pipe or a log, print each running attempt's working time used and left, latest score, tokens and cost this often, e.g. 5m (default: $REBENCH_PROGRESS_EVERY, else 5m); off: never.")] = None,
    resume: Annotated[int | None, typer.Option("--resume", help="Go on with this campaign (its harness died or was stopped); no other option needed.")] = None,
    db: DbOption = None,
) -> None:
    """Run k attempts of an agent on each environment under a time budget."""
    from rebench import api
    from rebench.gpus import parse_gpus
    from rebench.scheduler.progress_lines import progress_every as every
    from rebench.scheduler.view import CampaignLive

    # on a terminal, bars and attempt rows under the log lines; in a pipe, a line per attempt every few minutes
    live = CampaignLive(db, console, every_s=every(progress_every))

    def planned(campaign: PlannedCampaign) -> None:
        _planned(campaign)
        live.start(campaign.campaign_id)

    shown = observer(planned=planned, progress=_progress, finished=_finished)
    if resume is not None:
        with _stopping(live):
            result = api.resume_campaign(resume, db=db, calibrate=calibrate, cancel_on_sigterm=True, observer=shown)
        _summary(result.outcomes)
        return
    missing = [flag for flag, value in (("--env", env), ("--agent", agent), ("--budget", budget)) if not value]
    if missing or env is None or agent is None or budget is None:
        raise RebenchError(f"missing option {missing[0]}: `rebench run` needs --env, --agent and --budget "
                           "(or --resume CAMPAIGN_ID)")
    first, *more = agent_configs(agent, agent_arg or [], model=model, base_url=base_url,
                                 token_limit=token_limit, cost_limit_usd=cost_limit)
    spec = api.CampaignSpec(
        environments=env.split(","), profile=profile, budget_s=budget, k=k, backend=backend,
        seed=seed, parallel=parallel, gpus=parse_gpus(gpus), network=network, final_rule=final_rule,
        env_params=_parse_pairs(env_param or [], "--env-param"), executor=executor, ray_address=ray_address,
        ray_timeout_s=ray_timeout,
        agent=first, more_agents=more,
    )
    with _stopping(live):
        result = api.run_campaign(spec, db=db, calibrate=calibrate, cancel_on_sigterm=True, observer=shown)
    _summary(result.outcomes)


@contextmanager
def _stopping(live: CampaignLive) -> Iterator[None]:
    try:
        yield
    finally:
        live.stop()


def _planned(campaign: PlannedCampaign) -> None:
    spec = campaign.spec
    console.print(Text.assemble(
        f"campaign {campaign.campaign_id}: {len(campaign.attempt_ids)} attempt(s) of ",
        (", ".join(a.name for a in spec.agents), "bold"),
        f" on {', '.join(spec.environments)} ({spec.profile}, {format_duration(spec.budget_s)} each, "
        f"backend {spec.backend}{f', network {spec.network}' if spec.network else ''})"
        + (f"; env params {', '.join(f'{k}={v}' for k, v in spec.env_params.items())}" if spec.env_params else "")
    ))
    if campaign.concurrency is not None:
        console.print(f"  at once: {campaign.concurrency.text}", highlight=False, markup=False, soft_wrap=True)


def _progress(attempt_id: int, message: str) -> None:
    console.print(f"  attempt {attempt_id}: {message}", highlight=False)


def _finished(outcome: AttemptOutcome) -> None:
    detail = f" ({outcome.limit_reason})" if outcome.limit_reason else ""
    if outcome.error_message:
        detail += f": {outcome.error_message}"
    console.print(Text.assemble(f"  attempt {outcome.attempt_id}: ", (str(outcome.status), "bold"),
                                f"{detail}, normalized {fmt(outcome.final_normalized)}"))


def _summary(outcomes: list[AttemptOutcome]) -> None:
    columns = [Col("attempt", key=True), Col("environment", key=True), Col("agent", key=True),
               Col("status", key=True), Col("final raw", justify="right"), Col("normalized", justify="right"),
               Col("working time", justify="right")]
    rows = [[str(o.attempt_id), o.environment, o.agent, o.status, fmt(o.final_raw, 4), fmt(o.final_normalized),
             format_duration(o.working_s)] for o in sorted(outcomes, key=lambda o: o.attempt_id)]
    print_table(console, "Attempts", columns, rows, more="`rebench attempts show ID`")


