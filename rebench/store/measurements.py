"""Measurements of environments on one machine: calibrated anchors (`rebench envs calibrate`,
rebench.calibration) and score noise (`rebench envs noise`, rebench.noise). Keyed by environment,
version, profile and a hardware fingerprint, since timing scores only mean something per machine."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from rebench.store.models import Base, utcnow


class Calibration(Base):
    """Anchors measured on one machine: timing scores only mean something per hardware."""

    __tablename__ = "calibrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment: Mapped[str] = mapped_column(String(64), index=True)
    env_version: Mapped[str] = mapped_column(String(32))
    profile: Mapped[str] = mapped_column(String(32))
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    hardware_description: Mapped[str] = mapped_column(Text, default="")
    start_raw: Mapped[float] = mapped_column(Float)
    reference_raw: Mapped[float] = mapped_column(Float)
    heldout_start_raw: Mapped[float | None] = mapped_column(Float)
    """The same two solutions on the profile's held-out split (`final_split`); None: it has none, or
    the row predates migration 0012."""
    heldout_reference_raw: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NoiseMeasurement(Base):
    """How much one environment's score moves on one machine (`rebench envs noise`): the
    starting and reference solutions scored n times each, single calls and under the final rule."""

    __tablename__ = "noise_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment: Mapped[str] = mapped_column(String(64), index=True)
    env_version: Mapped[str] = mapped_column(String(32))
    profile: Mapped[str] = mapped_column(String(32))
    hardware: Mapped[str] = mapped_column(String(64), index=True)
    hardware_description: Mapped[str] = mapped_column(Text, default="")
    n: Mapped[int] = mapped_column(Integer)
    start_mean: Mapped[float] = mapped_column(Float)
    start_sd: Mapped[float] = mapped_column(Float)
    reference_mean: Mapped[float] = mapped_column(Float)
    reference_sd: Mapped[float] = mapped_column(Float)
    start_sd_normalized: Mapped[float] = mapped_column(Float)
    final_start_sd_normalized: Mapped[float | None] = mapped_column(Float)
    """The starting solution's sd, normalized, when each sample is taken with the final rule."""
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    samples: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
