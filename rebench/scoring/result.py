"""The JSON document the scoring helper writes for each score call."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field


class ScoreResult(BaseModel):
    """One score call. `raw` is None (NaN) when the solution is invalid or scoring failed.

    `message` may be shown to the agent; `details` never is.
    """

    raw: float | None
    message: dict[str, Any] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0
    timestamp: float = 0.0

    @property
    def valid(self) -> bool:
        return self.raw is not None and math.isfinite(self.raw)

    def feedback(self, score_visible: bool) -> dict[str, Any]:
        """What the agent sees: the message, validity, and the score only where visible."""
        shown: dict[str, Any] = {"valid": self.valid, "message": self.message}
        if score_visible:
            shown["score"] = self.raw if self.valid else None
        return shown
