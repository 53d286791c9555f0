"""`rebench human adjust|replay`: audited corrections of a human attempt's clock, and its recordings."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `human` group."""
