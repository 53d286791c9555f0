"""Who pays for a gateway request: meters (a token, a concurrency limit, spending) drawing on credits.

A credit is reserved before a request is forwarded, for the most it can cost (an upper bound on its
input tokens plus its capped output tokens, at the meter's price), and settled to the real cost when
the upstream answers, even after the client was answered 504. Reserving happens in the event loop
with no await between the check and the reservation, so concurrent requests cannot together spend
past the credit. `agent` has its own credit; `scorer` and `subject` (code a scoring call runs, on
per-call tokens) share the scorer's.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field


def new_token() -> str:
    return "rbgw-" + secrets.token_urlsafe(24)


@dataclass
class Credit:
    """A pool of credit (None: unlimited) and what is spent and reserved against it."""

    limit_usd: float | None
    spent_usd: float = 0.0
    reserved_usd: float = 0.0

    @property
    def left_usd(self) -> float | None:
        return None if self.limit_usd is None else self.limit_usd - self.spent_usd - self.reserved_usd

    def reserve(self, amount: float) -> bool:
        """Set `amount` aside when what is left covers it; False (nothing reserved) when not."""
        left = self.left_usd
        if left is not None and amount > left + 1e-12:
            return False
        self.reserved_usd += amount
        return True

    def settle(self, reserved: float, cost: float) -> None:
        """Replace a reservation by the request's real cost."""
        self.reserved_usd = max(0.0, self.reserved_usd - reserved)
        self.spent_usd += cost


@dataclass
class Meter:
    """A meter's token, concurrency slots and requests; it spends from `credit` (maybe shared)."""

    name: str
    credit: Credit
    concurrency: int
    token: str = field(default_factory=new_token)
    spent_usd: float = 0.0
    """This meter's own spending (its credit's `spent_usd` may include other meters')."""
    requests: int = 0
    in_flight: int = 0
    on_busy: Callable[[bool], None] | None = None
    """Told when the meter's first request starts (True) and its last one ends (False): the runner
    stops the attempt clock while the scorer (or code its scoring call runs) waits on the model."""
    slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.slots = asyncio.Semaphore(self.concurrency)

    @property
    def credit_usd(self) -> float | None:
        return self.credit.limit_usd

    def charge(self, reserved: float, cost: float) -> None:
        self.credit.settle(reserved, cost)
        self.spent_usd += cost

    def busy(self, change: int) -> None:
        self.in_flight += change
        if self.on_busy is not None and self.in_flight == (1 if change > 0 else 0):
            self.on_busy(change > 0)
