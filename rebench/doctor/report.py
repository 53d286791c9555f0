"""What `rebench doctor` found: one row per thing checked, and which of them a named need lacks."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class Status(StrEnum):
    OK = "ok"
    MISSING = "missing"  # absent or unusable; a failure when something named needs it
    WARNING = "warning"  # usable, but with a cost the row says (scoring unconfined, a disk nearly full)
    INFO = "info"  # a fact (versions, what profiles need), nothing to fix


class Check(BaseModel):
    """One thing looked at: what was found and, when it is not ok, the one line that fixes it."""

    area: str
    name: str
    status: Status
    found: str
    fix: str | None = None
    needed_by: list[str] = Field(default_factory=list)
    """The named options that need it (`--backend docker`, `--env E`, `--agent A`); empty: nobody asked."""

    @property
    def failing(self) -> bool:
        return self.status is Status.MISSING and bool(self.needed_by)

    @property
    def label(self) -> str:
        """How a person reads the row's name: `docker engine`, `database`."""
        return self.area if self.name == self.area else f"{self.area} {self.name}"

    def needed(self, *by: str | None) -> Check:
        """This check, needed by those of `by` that were named (None: not named)."""
        return self.model_copy(update={"needed_by": [*self.needed_by, *(b for b in by if b)]})


class DoctorReport(BaseModel):
    """Everything checked, in the order printed, and what was asked about."""

    backend: str
    """The one asked for, else the one `rebench run` would choose (docker when an engine answers)."""
    environments: list[str] = Field(default_factory=list)
    profile: str
    agents: list[str] = Field(default_factory=list)
    model: str | None = None
    checks: list[Check]

    @property
    def failing(self) -> list[Check]:
        return [check for check in self.checks if check.failing]

    @property
    def ok(self) -> bool:
        return not self.failing
