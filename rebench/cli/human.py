"""`rebench human start|list|status|stop|attach` (and `adjust|replay` from rebench.cli.human_audit)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, err_console, open_store, print_json

app = typer.Typer(help="Human expert attempts over SSH: start, watch, stop, correct and replay them.",
                  no_args_is_help=True, add_completion=False)

from rebench.cli import human_audit  # noqa: E402  (registers its commands on `app`)

human_audit.register(app)


def _duration(seconds: float) -> str:
    from rebench.budget import format_duration

    return format_duration(seconds)


@app.command("start")
def start_command(
    env: Annotated[str, typer.Option("--env", help="Environment name.")],
    name: Annotated[str, typer.Option("--name", help="The expert's name, recorded with the attempt.")],
    key: Annotated[Path, typer.Option("--key", help="The expert's OpenSSH public key file (e.g. id_ed25519.pub).")],
    profile: Annotated[str, typer.Option("--profile", help="Environment profile.")] = "tiny",
    budget: Annotated[str, typer.Option("--budget", help="Working-time budget, like 8h or 90m.")] = "8h",
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on (loopback unless you ask).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")] = 0,
    backend: Annotated[str, typer.Option("--backend", help="Sandbox backend (human attempts need docker).")] = "docker",
    gpus: Annotated[str, typer.Option("--gpus", help="GPU device ids for the attempt, like 0,1.")] = "",
    foreground: Annotated[bool, typer.Option("--foreground", help="Supervise in this process, not detached.")] = False,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Start a human attempt and print the ssh command the expert connects with."""
    from rebench.errors import RebenchError
    from rebench.human.service import HumanStart, start_human

    try:
        gpu_ids = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise RebenchError(f"invalid --gpus {gpus!r}: use device ids like 0,1") from None

    def announce(ready: HumanStart) -> None:
        console.print(ready.instructions(), highlight=False, soft_wrap=True)

    store = open_store(db)
    ready = start_human(store, environment=env, profile=profile, budget=budget, name=name, key=key, bind=bind,
                        port=port, backend=backend, gpus=gpu_ids, foreground=foreground,
                        on_ready=None if json_output else announce)
    if json_output:
        print_json({**ready.model_dump(), "ssh": ready.ssh_command})
    elif not foreground:
        announce(ready)


@app.command("list")
def list_command(db: DbOption = None, json_output: JsonOption = False) -> None:
    """Human attempts: environment, expert, state, working time used and left, port, supervisor."""
    from rebench.human.service import list_humans
    from rebench.tables import Col, print_table

    rows = list_humans(open_store(db, read_only=True))
    if json_output:
        print_json([r.model_dump() for r in rows])
        return
    columns = [Col("id", key=True), Col("env", key=True), Col("expert", key=True), Col("state"), Col("used"),
               Col("left"), Col("supervisor"), Col("port"), Col("status")]
    cells = [[str(r.attempt_id), r.environment, r.expert, r.state, _duration(r.working_s), _duration(r.left_s),
              "alive" if r.supervisor_alive else "-", str(r.port or "-"), r.status] for r in rows]
    print_table(console, "Human attempts", columns, cells, more="--json")


@app.command("status")
def status_command(attempt_id: int, db: DbOption = None, json_output: JsonOption = False) -> None:
    """One human attempt: its state, working time, score log and pauses."""
    from rebench.human.service import human_info

    info = human_info(open_store(db, read_only=True), attempt_id, details=True)
    if json_output:
        print_json(info.model_dump())
        return
    console.print(f"human attempt {info.attempt_id}: {info.environment} ({info.profile}), expert {info.expert}; "
                  f"{info.status}, {info.state}; working time {_duration(info.working_s)} used, "
                  f"{_duration(info.left_s)} left; port {info.port or '-'}; supervisor "
                  f"{'alive' if info.supervisor_alive else 'not running'}", highlight=False, soft_wrap=True)
    for score in info.scores:
        console.print(f"  score ({score['kind']}) at {_duration(float(str(score['working_s'])))}: {score['raw']}",
                      highlight=False)
    for pause in info.pauses:
        end = "open" if pause["end_s"] is None else f"{float(str(pause['end_s'])):.1f} s"
        console.print(f"  pause ({pause['reason']}) {float(str(pause['start_s'])):.1f} s - {end}", highlight=False)


@app.command("stop")
def stop_command(
    attempt_id: int,
    reason: Annotated[str | None, typer.Option("--reason", help="Why, kept with the attempt.")] = None,
    db: DbOption = None,
) -> None:
    """End a human attempt now: its work is snapshotted and scored, status done."""
    from rebench.human.service import stop_human

    info = stop_human(open_store(db), attempt_id, reason, log=lambda m: err_console.print(m, highlight=False))
    console.print(f"human attempt {attempt_id} ended: {info.status}, working time {_duration(info.working_s)}, "
                  f"final normalized score {info.final_normalized}", highlight=False)


@app.command("attach")
def attach_command(attempt_id: int, db: DbOption = None) -> None:
    """Start a new supervisor for a running human attempt whose supervisor died."""
    from rebench.human.service import attach_human

    ready = attach_human(open_store(db), attempt_id)
    console.print(ready.instructions(), highlight=False, soft_wrap=True)
