"""Gateway usage per attempt and meter, summed from gateway_requests (for `attempts show` and reports)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from rebench.store.models import GatewayRequest


class MeterUsage(BaseModel):
    """One meter's requests: answered and refused (any status but 200), tokens and cost."""

    requests: int = 0
    refused: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def line(self) -> str:
        refused = f" ({self.refused} refused)" if self.refused else ""
        return (f"{self.requests} requests{refused}, {self.input_tokens} in / {self.output_tokens} out tokens, "
                f"${self.cost_usd:.4f}")


def gateway_usage(session: Session, attempt_ids: Iterable[int]) -> dict[int, dict[str, MeterUsage]]:
    """{attempt id: {meter: usage}}; attempts without gateway requests are left out."""
    ids = list(attempt_ids)
    if not ids:
        return {}
    refused = func.sum(case((GatewayRequest.status != 200, 1), else_=0))
    rows = session.execute(
        select(GatewayRequest.attempt_id, GatewayRequest.meter, func.count(), refused,
               func.sum(GatewayRequest.input_tokens), func.sum(GatewayRequest.output_tokens),
               func.sum(GatewayRequest.cost_usd))
        .where(GatewayRequest.attempt_id.in_(ids))
        .group_by(GatewayRequest.attempt_id, GatewayRequest.meter))
    usage: dict[int, dict[str, MeterUsage]] = {}
    for attempt_id, meter, count, refused_count, tokens_in, tokens_out, cost in rows:
        usage.setdefault(attempt_id, {})[meter] = MeterUsage(
            requests=count, refused=int(refused_count or 0), input_tokens=int(tokens_in or 0),
            output_tokens=int(tokens_out or 0), cost_usd=float(cost or 0.0))
    return usage
