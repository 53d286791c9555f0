"""Entry points by name, for the groups through which packages extend rebench
(`rebench.agents`, `rebench.sandboxes`): one lookup and one rule for clashes."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from rebench.errors import RebenchError


def describe(ep: EntryPoint) -> str:
    """An entry point's target and, when known, the distribution that declares it."""
    dist = getattr(ep, "dist", None)
    return f"{ep.value} from distribution {dist.name!r}" if dist is not None else ep.value


def entry_points_by_name(group: str, what: str) -> dict[str, EntryPoint]:
    """The entry points of `group` by name. One name with two targets is a one-line error
    (`what` names the kind, e.g. "agent plugin"): which one runs would be a guess."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        earlier = found.get(ep.name)
        if earlier is not None and earlier.value != ep.value:
            raise RebenchError(
                f"{what} {ep.name!r} is registered twice: {describe(earlier)} and {describe(ep)}; "
                f"rename one entry point in group {group!r}"
            )
        found[ep.name] = ep
    return found
