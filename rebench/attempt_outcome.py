"""What one attempt came to, as the runner returns it (AttemptOutcome), and the failure that is the
harness's, not the agent's (InfrastructureFailure): the campaign retries an attempt once on that.
"""

from __future__ import annotations

from pydantic import BaseModel

from rebench.store.models import (
    AttemptStatus,
    ErrorSource,
    LimitReason,
)


class AttemptOutcome(BaseModel):
    attempt_id: int
    status: AttemptStatus
    environment: str = ""
    agent: str = ""
    error_source: ErrorSource | None = None
    error_message: str | None = None
    limit_reason: LimitReason | None = None
    final_raw: float | None = None
    final_normalized: float | None = None
    working_s: float = 0.0
    submitted: bool = False
    stop_campaign: str | None = None
    """Set when this failure would fail every attempt alike (the provider rejected the key):
    the one-line reason the campaign stops before starting more attempts."""


class InfrastructureFailure(Exception):
    """The sandbox died or vanished under the attempt; not the agent's fault."""
