"""The file name of the Inspect log that holds an attempt (one log per campaign, environment and agent).

rebench.export.inspect_log writes the logs under these names and the report's attempt pages link
to them, so the name lives here, below the export (which reads the report's data).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


def log_name(campaign: int | None, environment: str, agent: str, created: Any) -> str:
    """Inspect's own pattern (time, task, id), so the viewer sorts them by time."""
    tag = f"campaign-{campaign}" if campaign is not None else "imported"
    moment = datetime.fromtimestamp(0, UTC) if created is None else created
    if moment.tzinfo is None:  # SQLite gives naive datetimes back; they were written in UTC
        moment = moment.replace(tzinfo=UTC)
    return f"{moment:%Y-%m-%dT%H-%M-%S}+00-00_{_slug(environment)}_{_slug(agent)}_{tag}.eval"
