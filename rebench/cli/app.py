"""Entry point: `rebench envs|run|attempts|report ...`. Errors a user can fix print one line.

Subcommands load lazily: `rebench --help` and `rebench envs list` should not pay for
SQLAlchemy, NumPy or the report code. Each subcommand is declared here by name, module
and one-line help; its module is imported only when that subcommand runs (or shows its
own help). A test checks that the declared help matches the command's docstring.

Typer (>=0.29) vendors its own copy of Click, so this module catches Typer's classes
(`typer.TyperException`, `typer.Abort`, `typer.Exit`), never the `click` package's.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.core
import typer.main

from rebench.errors import RebenchError


@dataclass(frozen=True)
class Subcommand:
    """A subcommand known by name before its module is imported."""

    module: str
    attribute: str  # a typer.Typer (a command group) or a function (a single command)
    help: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "run": Subcommand("rebench.cli.run", "run_command",
                      "Run k attempts of an agent on each environment under a time budget."),
    "report": Subcommand("rebench.cli.report", "report_command",
                         "Score@k per agent and total time budget, with bootstrap intervals and human comparison."),
    "rescore": Subcommand("rebench.cli.rescore", "rescore_command",
                          "Score saved attempts' snapshots again, in fresh sandboxes, with the current scorer and anchors."),
    "envs": Subcommand("rebench.cli.envs", "app", "List, inspect, build and calibrate environments."),
    "attempts": Subcommand("rebench.cli.attempts", "app", "Inspect attempts: their status, score log and events."),
    "campaigns": Subcommand("rebench.cli.campaigns", "app",
                            "Campaigns: list them, show one's progress (also one running elsewhere)."),
    "import": Subcommand("rebench.cli.import_cmd", "app", "Import results produced elsewhere."),
    "export": Subcommand("rebench.cli.export", "app", "Write attempts in other tools' formats."),
    "view": Subcommand("rebench.cli.view", "view_command",
                       "Export the attempts and start Inspect's log viewer on them until Ctrl-C (needs the `inspect` extra)."),
    "images": Subcommand("rebench.cli.images", "app",
                         "Docker images: bootstrap a base without a registry, list what is built."),
    "human": Subcommand("rebench.cli.human", "app",
                        "Human expert attempts over SSH: start, watch, stop, correct and replay them."),
    "db": Subcommand("rebench.cli.db", "app", "Results databases: check one's schema, back it up, upgrade it."),
    "gc": Subcommand("rebench.cli.images", "gc_command",
                     "Remove containers and volumes of attempts that are no longer running."),
    "doctor": Subcommand("rebench.cli.doctor", "doctor_command",
                         "Say what this machine can run: Python, Docker, GPUs, SSH, Ray, model keys, the database."),
}

USAGE_EXIT = 2


def load_subcommand(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """Import a subcommand's module and build its real command object."""
    spec = SUBCOMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)  # a group even when it has one command (`import metr-runs`)
        group.name = name
        return group
    single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    single.command(name)(target)
    command = typer.main.get_command(single)
    command.name = name
    return command  # type: ignore[return-value]


class LazyGroup(typer.core.TyperGroup):
    """The top-level group: placeholders for listing, real commands loaded when resolved."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, spec in SUBCOMMANDS.items():
            if name not in self.commands:
                self.commands[name] = typer.core.TyperCommand(name=name, help=spec.help, short_help=spec.help)
        self._loaded: set[str] = set()

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = args[0] if args else None
        if name in SUBCOMMANDS and name not in self._loaded:
            self.commands[name] = load_subcommand(name)
            self._loaded.add(name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="rebench",
    cls=LazyGroup,
    help="Run AI agents and human experts on RE-Bench-style ML research engineering environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from rebench.provenance import rebench_version

        print(f"rebench {rebench_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", help="Print rebench's version and exit.",
                                      callback=_show_version, is_eager=True),
) -> None:
    """Run AI agents and human experts on RE-Bench-style ML research engineering environments."""


def _error(message: str) -> None:
    from rebench.cli.common import err_console, labelled

    err_console.print(labelled("error", message, "bold red"), soft_wrap=True)


def _usage_message(exc: typer.TyperException) -> str:
    """One line: the library's message, and where to find the command's usage."""
    text = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "rebench"
    return f"{text} (see '{path} --help')"


def main(argv: Sequence[str] | None = None) -> None:
    command = typer.main.get_command(app)
    try:
        code = command.main(args=list(argv) if argv is not None else None, prog_name="rebench",
                            standalone_mode=False)
        if isinstance(code, int) and code != 0:  # the library reports Ctrl-C this way outside standalone mode
            if code == 130:
                _error("interrupted")
            sys.exit(code)
    except RebenchError as exc:
        _error(str(exc))
        sys.exit(USAGE_EXIT)
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:
        exit_code = getattr(exc, "exit_code", 1)
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help is the message (rich has printed it already)
            if exc.format_message().strip():
                sys.stderr.write(exc.format_message() + "\n")
            sys.exit(exit_code)
        message = _usage_message(exc) if exit_code == USAGE_EXIT else " ".join(exc.format_message().split())
        _error(message)
        sys.exit(exit_code)


if __name__ == "__main__":
    main()
