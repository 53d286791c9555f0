"""`rebench images bootstrap|list|gc` and `rebench gc`: Docker images and cleanup."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, err_console, open_store, print_json
from rebench.tables import Col, print_table

if TYPE_CHECKING:
    from rebench.sandbox.docker import DockerEngine

app = typer.Typer(
    help="Docker images: bootstrap a base without a registry, list what is built.", no_args_is_help=True,
    add_completion=False,
)


def _log(message: str) -> None:
    err_console.print(message, highlight=False, markup=False)


@app.command("bootstrap")
def bootstrap_command(
    mirror: Annotated[
        str, typer.Option(help="Debian mirror for debootstrap.")
    ] = "http://deb.debian.org/debian",
    suite: Annotated[str, typer.Option(help="Debian suite (bookworm has Python 3.11).")] = "bookworm",
    base_image: Annotated[
        str | None,
        typer.Option(
            "--base-image", help="Build the rebench base from this image instead of bootstrapping Debian."
        ),
    ] = None,
    ca_bundle: Annotated[
        Path | None,
        typer.Option(
            "--ca-bundle",
            help="Extra CA certificates (PEM) to trust inside images, for TLS-inspecting proxies.",
        ),
    ] = None,
    cuda: Annotated[bool, typer.Option("--cuda", help="Also build the CUDA base for GPU profiles.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
) -> None:
    """Make the rebench base image: debootstrap + docker import, then the CPU base on top."""
    from rebench.images import bootstrap_raw_image, build_base_image, default_ca_bundle
    from rebench.sandbox.docker import DockerEngine

    started = time.monotonic()
    engine = DockerEngine.connect()
    if base_image is None:
        base_image = bootstrap_raw_image(engine, mirror=mirror, suite=suite, force=force, log=_log)
    bundle = ca_bundle or default_ca_bundle()
    tag = build_base_image(engine, "cpu", base_image=base_image, ca_bundle=bundle, force=force, log=_log)
    console.print(f"base image: {tag}")
    if cuda:
        cuda_tag = build_base_image(
            engine, "cuda", base_image=base_image, ca_bundle=bundle, force=force, log=_log
        )
        console.print(f"CUDA base image: {cuda_tag}")
    err_console.print(f"done in {time.monotonic() - started:.1f} s")


@app.command("list")
def list_command(json_output: JsonOption = False) -> None:
    """Images rebench built on this engine."""
    from rebench.images.naming import LABEL_KIND
    from rebench.sandbox.docker import DockerEngine

    rows = [
        {
            "id": image_id[7:19],
            "kind": labels.get(LABEL_KIND, ""),
            "tags": tags,
            "environment": labels.get("rebench.environment", ""),
            "profile": labels.get("rebench.profile", ""),
        }
        for image_id, tags, labels in DockerEngine.connect().images(LABEL_KIND)
    ]
    if json_output:
        print_json(rows)
        return
    columns = [Col("id", key=True), Col("environment", key=True), Col("profile", key=True), Col("kind"), Col("tags")]
    cells = [[str(row["id"]), str(row["environment"]) or "-", str(row["profile"]) or "-", str(row["kind"]),
              ", ".join(row["tags"])] for row in rows]
    print_table(console, "rebench images", columns, cells, more="--json")


@app.command("gc")
def images_gc_command(
    env: Annotated[list[str] | None, typer.Option("--env", help="Only this environment's images (repeatable).")] = None,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Remove superseded environment images: all but the newest per environment and profile.

    Kept whatever their age: images a container was made from (running, stopped or human
    attempts) and the current image of every environment with a resumable attempt (queued,
    running or interrupted) in the database, so `rebench run --resume` finds it."""
    from rebench.images.gc import prune_images
    from rebench.sandbox.docker import DockerEngine

    engine = DockerEngine.connect()
    report = prune_images(engine, keep=_resumable_images(engine, db), environments=env)
    if json_output:
        print_json(report.model_dump())
        return
    console.print(
        f"removed {len(report.removed)} superseded image(s), freed {report.freed_bytes / 1024**3:.2f} GiB; "
        f"kept {len(report.kept_newest)} newest, {len(report.kept_in_use)} in use"
        + (f", {len(report.refused)} the engine would not remove" if report.refused else ""), highlight=False)
    for entry in report.removed:
        console.print(f"  removed {', '.join(entry.tags) or entry.id[7:19]}", highlight=False, markup=False)


def _resumable_images(engine: DockerEngine, db: Path | None) -> list[str]:
    """Current image tags of environments that a resumable attempt in `db` will run; none when the
    database does not exist (gc never creates one)."""
    from sqlalchemy import select

    from rebench.environments.registry import EnvironmentRegistry
    from rebench.errors import RebenchError
    from rebench.images import current_environment_image
    from rebench.store.db import default_db_path
    from rebench.store.models import Attempt, AttemptStatus

    path = db if db is not None else default_db_path()
    if not path.is_file():
        return []
    resumable = (AttemptStatus.QUEUED, AttemptStatus.RUNNING, AttemptStatus.INTERRUPTED)
    with open_store(path, read_only=True).session() as session:
        pairs = set(session.execute(select(Attempt.environment, Attempt.profile).where(
            Attempt.status.in_(resumable), Attempt.backend == "docker")).tuples())
    registry, tags = EnvironmentRegistry(), []
    for environment, profile in sorted(pairs):
        try:
            tags.append(current_environment_image(registry.get(environment), profile, engine))
        except RebenchError:  # not known here any more, or never built: nothing to keep
            continue
    return tags


def gc_command(
    everything: Annotated[
        bool, typer.Option("--all", help="Also remove containers of attempts whose harness still runs "
                           "(never those of human attempts: `rebench human stop ID` ends them).")
    ] = False,
    images: Annotated[bool, typer.Option(
        "--images", help="Also remove superseded rebench images (older builds of an environment).")] = False,
    json_output: JsonOption = False,
) -> None:
    """Remove containers and volumes of attempts that are no longer running."""
    from rebench.images import collect_garbage
    from rebench.sandbox.docker import DockerEngine

    report = collect_garbage(DockerEngine.connect(), everything=everything, images=images)
    if json_output:
        print_json(report.model_dump())
        return
    console.print(
        f"removed {len(report.removed_containers)} container(s), {len(report.removed_volumes)} volume(s)"
        + (f", {len(report.removed_networks)} network(s)" if report.removed_networks else "") + "; "
        f"kept {len(report.kept_running)} of running attempts"
        + (f"; removed {len(report.removed_images)} superseded image(s)" if images else "")
    )
    if report.kept_human:
        attempts = ", ".join(f"{k.name} (attempt {k.attempt_id})" for k in report.kept_human)
        console.print(
            f"kept {len(report.kept_human)} container(s) of human attempts, which gc never removes (not even with "
            f"--all): {attempts}; end one with `rebench human stop ID`", highlight=False, markup=False, soft_wrap=True)
