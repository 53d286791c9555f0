"""SQLite storage through SQLAlchemy 2.x: campaigns, attempts, events, scores, pauses, calibrations."""

from rebench.store.db import Store, default_db_path
from rebench.store.models import Attempt, Calibration, Campaign, Event, Pause, ScoreEvent

__all__ = ["Attempt", "Calibration", "Campaign", "Event", "Pause", "ScoreEvent", "Store", "default_db_path"]
