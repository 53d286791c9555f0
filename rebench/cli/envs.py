"""`rebench envs list|show|build|calibrate|noise`: options in, rebench.api (or the registry) called, results printed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from rebench.cli.common import DbOption, JsonOption, console, fmt, observer, print_json
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.tables import Col, print_table

if TYPE_CHECKING:
    from rebench.environments.metadata import Profile
    from rebench.noise import NoiseSummary

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
    from rebench.api import anchors_in_use, noise_measured

    env = EnvironmentRegistry().get(name)
    resolved = {p: anchors.model_dump() for p, anchors in anchors_in_use(env, db).items()}
    noise = noise_measured(env, db)
    if json_output:
        print_json({"metadata": env.metadata.model_dump(), "root": str(env.root), "anchors_in_use": resolved,
                    "noise_here": {p: m.model_dump(mode="json") if m else None for p, m in noise.items()},
                    "content_hashes": {p: env.content_hash(p) for p in env.metadata.profiles}})
        return
    meta = env.metadata
    console.print(Text.assemble((meta.title, "bold"), f" ({meta.name} {meta.version})\n{meta.summary}\nfolder: {env.root}"))
    for profile_name, profile in meta.profiles.items():
        anchors = resolved[profile_name]
        console.print(Text.assemble(
            "\n", (profile_name, "bold"), f": {profile.description}\n"
            f"  hardware: {profile.hardware}\n"
            f"  content hash: {env.content_hash(profile_name)} (the key of its images and built assets)\n"
            f"  resources: {profile.resources.gpus} GPU, {profile.resources.cpus:g} CPU, "
            f"{profile.resources.memory_gb:g} GB\n"
            f"  score: {profile.direction} is better, final = {_final_text(profile)}, "
            f"visible to agent: {profile.score_visible}, timeout {profile.score_timeout_s:g} s\n"
            f"  declared anchors: start {profile.anchors.start}, reference {profile.anchors.reference} "
            f"({profile.anchors.source})\n"
            f"  in use here: start {anchors['start']:.4f}, reference {anchors['reference']:.4f} ({anchors['kind']})\n"
            + _heldout_lines(profile, anchors.get("heldout")) +
            f"  {_noise_line(env, profile_name, noise[profile_name])}"
            + "".join(f"\n  operator asset {a.name} ({a.file}): {a.source}" for a in profile.assets)
        ))


def _heldout_lines(profile: Profile, in_use: dict[str, Any] | None) -> str:
    """A profile's held-out split (docs/heldout.md): its declared anchors and those in use here."""
    split = profile.final_split
    if split is None or in_use is None:
        return ""
    return (f"  held-out split {split.params}: declared anchors start {split.anchors.start}, reference "
            f"{split.anchors.reference}; in use here: start {in_use['start']:.4f}, reference "
            f"{in_use['reference']:.4f} ({in_use['kind']}); probing margin {split.margin:g}\n")


def _final_text(profile: Profile) -> str:
    if profile.final_score != "rescore_best":
        return f"{profile.final_score} valid"
    rescore = profile.rescore
    return f"median of {rescore.repeats} re-scores, best of the {rescore.candidates} best score calls' solutions"


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


def _noise_line(env: Environment, profile: str, measured: NoiseSummary | None) -> str:
    from rebench.noise import paper_start_sd

    paper = paper_start_sd(env)
    paper_text = f"paper {paper:g}" if paper is not None else "no paper figure"
    if measured is None:
        return f"scoring noise here: not measured ({paper_text}; `rebench envs noise {env.name} --profile {profile}`)"
    when = measured.created_at.strftime("%Y-%m-%d") if measured.created_at else "?"
    return (f"scoring noise here: sd of the start {measured.start_sd_normalized:.3f} normalized per call, "
            f"{measured.final_start_sd_normalized:.3f} per final score ({_rule(measured)}); {paper_text} "
            f"(n={measured.n}, {when})")


def _rule(measured: NoiseSummary) -> str:
    """How one final-rule score of the start was taken, and whether the profile's rule takes it so."""
    if measured.repeats == 1:
        return f"{measured.final_rule}: one call"
    if measured.final_rule == "rescore_best":
        return f"median of {measured.repeats}"
    return f"median of {measured.repeats}, not {measured.final_rule}"


@app.command("noise")
def noise_command(
    name: str,
    profile: ProfileOption = "tiny",
    n: Annotated[int, typer.Option("-n", help="Scores of each solution (2-100).")] = 10,
    rescore_repeats: Annotated[int | None, typer.Option(
        "--rescore-repeats",
        help="Take each final-rule score of the start as the median of this many calls "
             "(default: the profile's rescore.repeats under rescore_best, else 1).")] = None,
    backend: BackendOption = "local",
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Score the starting and reference solutions n times each here; print and store their spread."""
    from rebench.api import measure_noise

    result = measure_noise(name, profile, backend, n, rescore_repeats=rescore_repeats, db=db, observer=observer())
    if json_output:
        print_json(result.model_dump(mode="json"))
        return
    print_noise(result)


def print_noise(result: NoiseSummary) -> None:
    """The measurement as a table: raw mean and sd, sd in normalized units, and the paper's figure."""
    rows = [
        ["start", "one call", str(result.start_calls), fmt(result.start_mean, 4), fmt(result.start_sd, 4),
         fmt(result.start_sd_normalized, 3), fmt(result.paper_start_sd, 3)],
        ["start", f"final ({_rule(result)})", f"{result.n}x{result.repeats}", fmt(result.final_start_mean, 4),
         fmt(result.final_start_sd, 4), fmt(result.final_start_sd_normalized, 3), fmt(result.paper_start_sd, 3)],
        ["reference", "one call", str(result.n), fmt(result.reference_mean, 4), fmt(result.reference_sd, 4),
         fmt(result.reference_sd_normalized, 3), "-"],
    ]
    columns = [Col("solution", key=True), Col("score", key=True), Col("calls", justify="right"),
               Col("raw mean", justify="right"), Col("raw sd", justify="right"),
               Col("sd norm.", justify="right"), Col("paper", justify="right")]
    print_table(console, f"Scoring noise: {result.environment} ({result.profile}) on {result.hardware_description}",
                columns, rows, more="--json")
    console.print(f"sd norm.: raw sd / |reference mean - start mean| ({result.scale:.4g}); paper: RE-Bench's "
                  f"sd of the starting score (Table 6, its hardware); {result.seconds_per_call:.1f} s per call",
                  highlight=False)
