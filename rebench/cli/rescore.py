"""`rebench rescore`: score saved attempts again with the current scorer and anchors (rebench.rescoring)."""

from __future__ import annotations

from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, err_console, labelled, open_store, print_json
from rebench.errors import RebenchError


def rescore_command(
    attempt: Annotated[list[int] | None, typer.Option("--attempt", help="Re-score this attempt (repeatable).")] = None,
    campaign: Annotated[int | None, typer.Option("--campaign", help="Re-score every attempt of this campaign.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="Re-score every attempt at this environment "
                                                  "(repeatable).")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="local or docker (default: docker when an "
                                                "engine answers).")] = None,
    parallel: Annotated[int, typer.Option("--parallel", help="Attempts re-scored at once.")] = 1,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Score saved attempts' snapshots again, in fresh sandboxes, with the current scorer and anchors."""
    from rebench.rescoring.plan import Selection, check_selection
    from rebench.rescoring.run import rescore_attempts
    from rebench.sandbox.factory import resolve_backend

    selection = Selection(attempts=attempt or [], campaign=campaign, environments=env or [])
    check_selection(selection)
    if parallel < 1:
        raise RebenchError(f"invalid --parallel {parallel}: must be 1 or more")
    chosen, warning = resolve_backend(backend)
    if warning:
        err_console.print(labelled("warning", warning))
    from rebench.store.db import default_db_path

    if not (db or default_db_path()).exists():
        raise RebenchError(f"no database at {db or default_db_path()}: nothing to re-score")
    store = open_store(db)
    outcome = rescore_attempts(store, selection, backend=chosen, parallel=parallel,
                               log=lambda m: err_console.print(m, highlight=False, markup=False))
    if json_output:
        print_json(outcome.model_dump(mode="json"))
    else:
        verb = "resumed" if outcome.resumed else "started"
        console.print(f"rescore run {outcome.run_id} ({verb}): {len(outcome.rescored)} re-scored now, "
                      f"{len(outcome.already)} done before, {len(outcome.skipped)} skipped, "
                      f"{len(outcome.failed)} failed; `rebench report --rescored {outcome.run_id}` compares them",
                      highlight=False, soft_wrap=True)
        for attempt_id, why in sorted(outcome.skipped.items()):
            console.print(f"  skipped attempt {attempt_id}: {why}", highlight=False, markup=False, soft_wrap=True)
    if outcome.failed:
        first = min(outcome.failed)
        raise RebenchError(f"rescore run {outcome.run_id} is incomplete: attempt {first} failed "
                           f"({outcome.failed[first]}); run the same command again to finish it")
