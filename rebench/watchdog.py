"""The hard timer an agent runs under: at the budget (or once it submits) its task is cancelled, which
kills its running commands. It wakes when the agent's task ends, when it submits, or when its working
time could reach the budget (working time never runs faster than the wall clock, so a wait of the time
left never oversleeps; a pause meanwhile only means another wait), not on a fixed tick: a timer per
attempt, not 20 wake-ups a second each (benchmarks/load.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from rebench.agents.base import LimitExceeded
from rebench.attempt_outcome import AttemptOutcome, InfrastructureFailure
from rebench.context import AttemptContext
from rebench.sandbox.base import Sandbox
from rebench.store.models import (
    AttemptStatus,
    ErrorSource,
    LimitReason,
)

CANCEL_GRACE_S = 10.0


async def watch_agent(task: asyncio.Task[None], ctx: AttemptContext, sandbox: Sandbox, outcome: AttemptOutcome) -> None:
    """Wait for the agent's task under the hard timer: the budget is checked every tick, not only when the
    agent next acts; at the limit (or a submit) the task is cancelled, which kills its running commands.
    Sets the outcome's status (and limit or error); InfrastructureFailure when the sandbox died under it."""
    reason: str | None = None
    submitted = asyncio.ensure_future(ctx.submitted.wait())
    try:
        while not task.done():
            left = ctx.budget_s - ctx.clock.working_seconds()
            if left <= 0:
                reason = "time"
                break
            if ctx.submitted.is_set():
                reason = "submitted"
                break
            await asyncio.wait({task, submitted}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
    finally:
        submitted.cancel()
    ctx.end_agent()  # its `task` door closes first: a score it left running or queued is not recorded
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            async with asyncio.timeout(CANCEL_GRACE_S):
                await task
    ended_itself = reason is None and not task.cancelled() and task.exception() is None
    if ended_itself and not ctx.submitted.is_set() and ctx.clock.working_seconds() >= ctx.budget_s:
        reason = "time"  # the agent stopped because its time was up, just before the watchdog did
    if reason == "time":
        ctx.recorder.event("limit", which="time", detail=f"working time reached {ctx.budget_s:.0f} s")
        outcome.status, outcome.limit_reason = AttemptStatus.LIMIT, LimitReason.TIME
        return
    if reason == "submitted":
        outcome.status = AttemptStatus.DONE
        return
    exc = task.exception() if not task.cancelled() else None
    if isinstance(exc, LimitExceeded):
        outcome.status, outcome.limit_reason = AttemptStatus.LIMIT, LimitReason(exc.which)
    elif exc is not None:
        if not await sandbox.alive():
            raise InfrastructureFailure(f"the sandbox died: {type(exc).__name__}: {exc}")
        # Exceptions may say who is to blame (a provider outage is not the agent's fault).
        blamed = getattr(exc, "error_source", None)
        outcome.status = AttemptStatus.ERROR
        outcome.error_source = ErrorSource(blamed) if blamed in tuple(ErrorSource) else ErrorSource.AGENT
        outcome.error_message = f"{type(exc).__name__}: {exc}"
        ctx.recorder.event("agent_error", error=outcome.error_message, error_source=outcome.error_source)
        if getattr(exc, "stops_campaign", False):
            outcome.stop_campaign = str(exc)
    else:
        outcome.status = AttemptStatus.DONE
