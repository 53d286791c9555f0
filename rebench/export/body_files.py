"""Where an installed agent's request and answer bodies are, and reading one without following the
event's path anywhere else (the Inspect and the ATIF exports both read them; no optional package).

A body file is read only from the attempt's own `model-calls` folder under the database's snapshot
folder, after resolving links: whatever the event names, no other file is opened.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path, PurePath
from typing import Any

MAX_BODY_BYTES = 64 * 2**20
"""A larger body file is not read (the gateway's request limit keeps real ones far below)."""
CALL_FILE = re.compile(r"[0-9]{1,9}\.json")
CALLS_FOLDER = "model-calls"


class BodyFiles:
    """Where one attempt's body files may be: `<snapshots>/attempt-N[.K]-agent/model-calls/NNNN.json`
    (rebench.runner puts the agent's folder beside the attempt's snapshot). The event's path is only
    a name: its last three parts pick the file inside that folder, so a database moved with its
    snapshot folder still finds them, and a path elsewhere or through a link is refused."""

    def __init__(self, snapshots_dir: Path, attempt_id: int, snapshot_path: str | None) -> None:
        self.root = Path(os.path.realpath(snapshots_dir))
        self.folder = re.compile(rf"attempt-{attempt_id}(\.[0-9]+)?-agent")
        self.exact: str | None = None
        """The agent folder of the attempt's own snapshot, when it has one (`attempt-N.K` is another
        database's attempt N when this one's is `attempt-N`)."""
        if snapshot_path:
            base = PurePath(snapshot_path)
            base = base.parent if base.name == "final" else base  # a re-scored attempt's final snapshot
            self.exact = base.name + "-agent"

    def locate(self, named: str) -> tuple[Path | None, str | None]:
        """(the file to read, None) or (None, why none is read)."""
        parts = PurePath(named).parts
        if len(parts) < 3 or parts[-2] != CALLS_FOLDER or not CALL_FILE.fullmatch(parts[-1]) or not (
                parts[-3] == self.exact if self.exact else self.folder.fullmatch(parts[-3])):
            return None, f"body file {named!r} is not in this attempt's {CALLS_FOLDER} folder: not read"
        path = self.root / parts[-3] / CALLS_FOLDER / parts[-1]
        if Path(os.path.realpath(path)) != path:
            return None, f"body file {named!r} leads out of the snapshot folder {str(self.root)!r}: not read"
        return path, None

    def read(self, named: str) -> tuple[dict[str, Any] | None, str | None]:
        """The body file's JSON object, or None and why."""
        path, why = self.locate(named)
        if path is None:
            return None, why
        try:
            size = path.stat().st_size
            if size > MAX_BODY_BYTES:
                return None, f"body file {str(path)!r} holds {size} bytes, more than {MAX_BODY_BYTES}: not read"
            body = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None, f"body file {str(path)!r} is missing"
        except (OSError, ValueError) as exc:
            return None, f"body file {str(path)!r} cannot be read as JSON: {exc}"
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            return None, f"body file {str(path)!r} holds no request object"
        return body, None
