"""`rebench human start|list|status|stop|attach` (and `adjust|replay` from rebench.cli.human_audit)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Human expert attempts over SSH: start, watch, stop, correct and replay them.",
                  no_args_is_help=True, add_completion=False)

from rebench.cli import human_audit  # noqa: E402  (registers its commands on `app`)

human_audit.register(app)
