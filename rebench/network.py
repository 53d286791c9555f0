"""The network an attempt's sandbox gets, per run (`rebench run --network`).

RE-Bench gave every task full internet access; rebench's sandboxes have none unless a run asks
for it. Scores with and without network are not comparable (an agent may look things up, fetch
packages or published solutions), so the policy is recorded on every attempt row, shown by
`rebench attempts show` and kept apart in the report. What each policy lets the agent reach on
the Docker backend is in docs/security.md ("The network").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from rebench.errors import RebenchError


class NetworkPolicy(StrEnum):
    NONE = "none"
    """Only the container's loopback (and, where the profile has one, the model gateway on it)."""
    FULL = "full"
    """A bridged network of the attempt's own: the outside world, but not the host, other attempts,
    link-local addresses, or anything at all while a score call runs."""


NETWORK_POLICIES = tuple(p.value for p in NetworkPolicy)


def parse_network(value: Any, option: str = "--network") -> NetworkPolicy:
    """`value` as a policy; a one-line RebenchError naming it and the allowed ones otherwise.
    A boolean is read as campaigns stored before the policy existed wrote it (true: full)."""
    if isinstance(value, bool):
        return NetworkPolicy.FULL if value else NetworkPolicy.NONE
    try:
        return NetworkPolicy(value)
    except ValueError:
        raise RebenchError(f"invalid {option} {value!r}; allowed: {', '.join(NETWORK_POLICIES)}") from None


def effective_network(requested: NetworkPolicy | None, profile_asks: bool) -> NetworkPolicy:
    """The policy an attempt runs under: the run's `--network`, else `full` where the profile says
    it cannot work without network (`network = true`), else `none`."""
    if requested is not None:
        return requested
    return NetworkPolicy.FULL if profile_asks else NetworkPolicy.NONE
