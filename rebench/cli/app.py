"""Entry point: `rebench envs|run|attempts|report ...`. Errors a user can fix print one line."""

from __future__ import annotations

import sys

import click
import typer

from rebench.cli import attempts, envs, import_cmd, report, run
from rebench.cli.common import err_console
from rebench.errors import RebenchError

app = typer.Typer(
    name="rebench",
    help="Run AI agents and human experts on RE-Bench-style ML research engineering environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(envs.app, name="envs")
app.add_typer(attempts.app, name="attempts")
app.add_typer(import_cmd.app, name="import")
app.command("run")(run.run_command)
app.command("report")(report.report_command)


def main(argv: list[str] | None = None) -> None:
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code != 0:  # click reports Ctrl-C this way outside standalone mode
            if code == 130:
                err_console.print("interrupted")
            sys.exit(code)
    except RebenchError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except click.exceptions.Abort:
        err_console.print("interrupted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
