"""SQLite storage through SQLAlchemy 2.x: campaigns, attempts, events, scores, pauses, measurements, re-scores."""

from rebench.store.db import Store, default_db_path
from rebench.store.measurements import Calibration, NoiseMeasurement
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Campaign,
    CampaignStatus,
    ErrorSource,
    Event,
    EventKind,
    LimitReason,
    Pause,
    ScoreEvent,
    ScoreKind,
)
from rebench.store.rescores import Rescore, RescoreRun

__all__ = [
    "Attempt", "AttemptStatus", "Calibration", "Campaign", "CampaignStatus", "ErrorSource", "Event", "EventKind",
    "LimitReason", "NoiseMeasurement", "Pause", "Rescore", "RescoreRun", "ScoreEvent", "ScoreKind", "Store",
    "default_db_path",
]
