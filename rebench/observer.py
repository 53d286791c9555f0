"""What the library's long calls report while they work (`Observer` callbacks) and what they return
(calibration and campaign results); rebench.api re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from rebench.attempt_outcome import AttemptOutcome
from rebench.campaign import CampaignSpec
from rebench.scheduler.concurrency import Concurrency

if TYPE_CHECKING:
    pass


def _ignore(*_args: object) -> None:
    return None


@dataclass
class Observer:
    """Callbacks a long call makes while it works; the CLI prints them, a script may leave them out."""

    warning: Callable[[str], None] = _ignore
    """Something that changes what the results mean (no Docker engine, scoring unconfined)."""
    note: Callable[[str], None] = _ignore
    """Something worth knowing that changes nothing (the local backend does not isolate)."""
    log: Callable[[str], None] = _ignore
    """Progress of builds, orphan recovery and calibration runs."""
    calibrated: Callable[[CalibrationResult], None] = _ignore
    planned: Callable[[PlannedCampaign], None] = _ignore
    """The campaign and its attempt rows are written; attempts start next."""
    progress: Callable[[int, str], None] = _ignore
    """(attempt id, what it is doing now)."""
    finished: Callable[[AttemptOutcome], None] = _ignore
    """One attempt (or its retry) ended."""


class CalibrationResult(BaseModel):
    """Anchors measured on this machine and stored; normalization uses them from now on."""

    environment: str
    env_version: str
    profile: str
    hardware: str = Field(description="hardware key the anchors are stored under")
    hardware_description: str
    start_raw: float
    reference_raw: float
    heldout_start_raw: float | None = Field(None, description="on the held-out split (a profile's final_split)")
    heldout_reference_raw: float | None = None

    def summary(self) -> str:
        heldout = ""
        if self.heldout_start_raw is not None and self.heldout_reference_raw is not None:
            heldout = (f"; held-out split: start {self.heldout_start_raw:.4f}, "
                       f"reference {self.heldout_reference_raw:.4f}")
        return (f"calibrated {self.environment} ({self.profile}) on {self.hardware_description}: "
                f"start {self.start_raw:.4f}, reference {self.reference_raw:.4f}{heldout} "
                f"(hardware key {self.hardware})")


class PlannedCampaign(BaseModel):
    """A campaign whose rows are written: its id, its queued attempts, and the spec with the backend chosen."""

    campaign_id: int
    attempt_ids: list[int]
    spec: CampaignSpec
    concurrency: Concurrency | None = Field(None, description="how many attempts run at once and what bounds it")


class CampaignResult(PlannedCampaign):
    """A finished campaign. `outcomes` has one entry per attempt run, retries included, by attempt id."""

    outcomes: list[AttemptOutcome]
    warnings: list[str] = Field(default_factory=list, description="what Observer.warning was told")
    db: Path
