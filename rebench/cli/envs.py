"""`rebench envs list|show|build|calibrate`: options in, rebench.api (or the registry) called, results printed."""

from __future__ import annotations

from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, fmt, observer, print_json
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.tables import Col, print_table

app = typer.Typer(help="List, inspect, build and calibrate environments.", no_args_is_help=True, add_completion=False)

ProfileOption = Annotated[str, typer.Option("--profile", "-p", help="Profile name, e.g. tiny or paper.")]
BackendOption = Annotated[str | None, typer.Option("--backend", help="local or docker (default: docker if an engine answers).")]


def _profile_rows(env: Environment) -> list[dict[str, object]]:
    rows = []
    for name, profile in env.metadata.profiles.items():
        rows.append({
            "environment": env.name, "title": env.metadata.title, "version": env.version, "profile": name,
            "gpus": profile.resources.gpus, "cpus": profile.resources.cpus, "memory_gb": profile.resources.memory_gb,
            "direction": profile.direction, "final_score": profile.final_score,
            "score_visible": profile.score_visible,
            "anchor_start": profile.anchors.start, "anchor_reference": profile.anchors.reference,
        })
    return rows


@app.command("list")
def list_command(json_output: JsonOption = False) -> None:
    """Every environment with its profiles, resources and anchors."""
    registry = EnvironmentRegistry()
    if not registry.names():
        raise RebenchError(f"no environments in {registry.root}: set REBENCH_ENVIRONMENTS to an environments folder "
                           "or run from a rebench checkout")
    rows = [row for env in registry.all() for row in _profile_rows(env)]
    if json_output:
        print_json(rows)
        return
    columns = [Col("environment", key=True), Col("profile", key=True), Col("title"), Col("resources"),
               Col("start", justify="right"), Col("reference", justify="right"), Col("better"), Col("final")]
    cells = [[str(row["environment"]), str(row["profile"]), str(row["title"]),
              f"{row['gpus']} GPU, {row['cpus']:g} CPU, {row['memory_gb']:g} GB",
              fmt(row["anchor_start"], 4), fmt(row["anchor_reference"], 4),  # type: ignore[arg-type]
              str(row["direction"]), str(row["final_score"])] for row in rows]
    print_table(console, "Environments", columns, cells, more="--json")


@app.command("show")
def show_command(name: str, db: DbOption = None, json_output: JsonOption = False) -> None:
    """Metadata, profiles and the anchors normalization will use on this machine."""
    from rebench.api import anchors_in_use

    env = EnvironmentRegistry().get(name)
    resolved = {p: anchors.model_dump() for p, anchors in anchors_in_use(env, db).items()}
    if json_output:
        print_json({"metadata": env.metadata.model_dump(), "root": str(env.root), "anchors_in_use": resolved})
        return
    meta = env.metadata
    console.print(f"[bold]{meta.title}[/] ({meta.name} {meta.version})\n{meta.summary}\nfolder: {env.root}")
    for profile_name, profile in meta.profiles.items():
        anchors = resolved[profile_name]
        console.print(
            f"\n[bold]{profile_name}[/]: {profile.description}\n"
            f"  hardware: {profile.hardware}\n"
            f"  resources: {profile.resources.gpus} GPU, {profile.resources.cpus:g} CPU, "
            f"{profile.resources.memory_gb:g} GB\n"
            f"  score: {profile.direction} is better, final = {profile.final_score} valid, "
            f"visible to agent: {profile.score_visible}, timeout {profile.score_timeout_s:g} s\n"
            f"  declared anchors: start {profile.anchors.start}, reference {profile.anchors.reference} "
            f"({profile.anchors.source})\n"
            f"  in use here: start {anchors['start']:.4f}, reference {anchors['reference']:.4f} ({anchors['kind']})"
        )


@app.command("build")
def build_command(
    name: str,
    profile: ProfileOption = "tiny",
    backend: BackendOption = None,
    asset: Annotated[list[str] | None, typer.Option("--asset", help="NAME=PATH of a file the profile needs from you (listed in its environment.toml); repeatable. Also read from the assets settings file.")] = None,
) -> None:
    """Prepare an environment: its virtualenv and assets (local) or its image (docker)."""
    from rebench.api import build_environment
    from rebench.environments.assets import parse_asset_options

    given = parse_asset_options(asset or [])
    chosen = build_environment(name, profile, backend, observer=observer(), assets=given)
    console.print(f"built {name} ({profile}) for the {chosen} backend")


@app.command("calibrate")
def calibrate_command(
    name: str,
    profile: ProfileOption = "tiny",
    repeats: Annotated[int | None, typer.Option("--repeats", min=1, help="Scoring runs per solution (default: the profile's rescore.repeats under rescore_best, else 3).")] = None,
    backend: BackendOption = "local",
    db: DbOption = None,
) -> None:
    """Measure the starting and reference raw scores on this machine and store them as anchors."""
    from rebench.api import calibrate

    calibrate(name, profile, backend, repeats, db=db, observer=observer())
