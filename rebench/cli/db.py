"""`rebench db check|backup|upgrade PATH`: a results database's schema, copies and upgrades, by hand.

Only commands that write ever upgrade a database on their own (after a backup); these let an
operator look first, keep a copy, and upgrade a shared database when its users are ready.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import JsonOption, console, print_json

app = typer.Typer(help="Results databases: check one's schema, back it up, upgrade it.", no_args_is_help=True,
                  add_completion=False)

PathArgument = Annotated[Path, typer.Argument(help="The database file.")]


def _existing(path: Path) -> None:
    from rebench.errors import RebenchError

    if not path.is_file():
        raise RebenchError(f"no database at {path}")


@app.command("check")
def check_command(path: PathArgument, json_output: JsonOption = False) -> None:
    """Say what the file is and whether this rebench can use it as it is (exit 0 only then)."""
    from rebench.errors import RebenchError
    from rebench.store.schema import FileKind, head_revision, inspect_file

    _existing(path)
    state = inspect_file(path)
    if json_output:
        print_json({"path": str(path), "kind": state.kind.value, "revision": state.revision,
                    "needs": head_revision(), "detail": state.detail})
    problem = state.problem() or (state.needs_upgrade() if state.kind is FileKind.OLDER else None)
    if problem:
        raise RebenchError(problem)
    if not json_output:
        console.print(f"database {path} is at schema {state.revision}, the one this rebench uses", highlight=False)


@app.command("backup")
def backup_command(
    path: PathArgument,
    out: Annotated[Path | None, typer.Option("--out", help="Where the copy goes (default: PATH.bak-<schema>).")] = None,
) -> None:
    """A consistent copy of the database (safe while a campaign writes to it); never overwrites a file."""
    from rebench.errors import RebenchError
    from rebench.store.schema import FileKind, backup, backup_path, inspect_file

    _existing(path)
    state = inspect_file(path)
    if state.kind in (FileKind.FOREIGN, FileKind.DAMAGED):
        raise RebenchError(str(state.problem()))
    target = backup(path, out or backup_path(state))
    console.print(f"copied {path} to {target}", highlight=False)


@app.command("upgrade")
def upgrade_command(path: PathArgument) -> None:
    """Bring the database to this rebench's schema, keeping the file as it was beside it (PATH.bak-<schema>)."""
    from rebench.store.db import Store
    from rebench.store.schema import FileKind, inspect_file

    _existing(path)
    state = inspect_file(path)
    if state.kind is FileKind.CURRENT:
        console.print(f"database {path} is already at schema {state.revision}; nothing to do", highlight=False)
        return
    Store(path, on_upgrade=lambda line: console.print(line, highlight=False)).close()
