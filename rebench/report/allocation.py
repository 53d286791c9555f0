"""Time allocation: a total budget per environment split as k attempts of T each.

Total budget = k x per-attempt budget. A group of attempts with per-attempt budget T
serves a total budget B as T@k with k = B / T when B is a whole multiple of T, and as a
truncated T@1 when B < T: an attempt then scores what its score log had reached by B of
working time (only attempts with a score log can do this).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rebench.budget import format_duration, parse_duration
from rebench.errors import RebenchError

DEFAULT_TOTAL_BUDGETS = ("30m", "2h", "8h", "16h", "32h")
CURVE_KS = tuple(2**i for i in range(8))  # 1..128, the range of the paper's scaling plots
_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Allocation:
    """How a total budget is spent: k attempts of `budget_s`, possibly truncated to `total_s`."""

    budget_s: float
    k: int
    total_s: float
    truncated: bool = False

    @property
    def label(self) -> str:
        if self.truncated:
            return f"{format_duration(self.budget_s)} cut to {format_duration(self.total_s)}"
        return f"{format_duration(self.budget_s)}@{self.k}"


def parse_total_budgets(text: str | Sequence[str] | None) -> tuple[float, ...]:
    """`30m,2h,8h` (or a list of such) into sorted, distinct seconds."""
    if text is None:
        items: Sequence[str] = DEFAULT_TOTAL_BUDGETS
    elif isinstance(text, str):
        items = [part for part in text.split(",") if part.strip()]
    else:
        items = [part for chunk in text for part in chunk.split(",") if part.strip()]
    if not items:
        raise RebenchError("no total budgets given; use e.g. --budgets 30m,2h,8h,16h,32h")
    return tuple(sorted({float(parse_duration(item)) for item in items}))


def allocation_for(total_s: float, budget_s: float) -> Allocation | None:
    """The allocation that spends `total_s` with attempts of `budget_s`, or None if none does."""
    if budget_s <= 0:
        return None
    ratio = total_s / budget_s
    if ratio < 1 - _TOLERANCE:
        return Allocation(budget_s=budget_s, k=1, total_s=total_s, truncated=True)
    k = round(ratio)
    if abs(ratio - k) > _TOLERANCE * max(1.0, ratio):
        return None
    return Allocation(budget_s=budget_s, k=k, total_s=k * budget_s)
