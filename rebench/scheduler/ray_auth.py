"""Ray's token authentication, as it meets the harness's driver.

Since Ray 2.59 a cluster started on a machine (`ray.init()`, `ray start --head`) requires a token
by default, and its nodes find it in `~/.ray/auth_token`, `RAY_AUTH_TOKEN_PATH` or
`RAY_AUTH_TOKEN`. A process that joins an explicit address sends that token only when
`RAY_AUTH_MODE=token` is set, which a user who started the head with plain `ray start --head`
never set. A driver in token mode cannot simply be the default, though: it then refuses what the
workers of a cluster without authentication report to it (a streaming task's items; tried on Ray
2.60). So the driver joins as the user's environment says, and when the cluster refuses it (Ray's
log shows it within a second) and the user chose no mode but a token is at hand, it joins again
in token mode; a refusal after that is told in one line with the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

REFUSED = b"InvalidAuthToken"
"""What Ray's GCS client logs, once a second, while the cluster refuses the driver's token."""
FIX = ("give the driver the head's token: RAY_AUTH_TOKEN=<token> or ~/.ray/auth_token "
       "(`ray get-auth-token` on the head prints it), with RAY_AUTH_MODE=token on every node and "
       "the driver (docs/scheduling.md)")


def token_at_hand(env: Mapping[str, str], home: Path | None = None) -> bool:
    """Whether Ray would find a token for this process (its own order: variable, path, default file)."""
    if env.get("RAY_AUTH_TOKEN", "").strip() or env.get("RAY_AUTH_TOKEN_PATH", "").strip():
        return True
    return ((home or Path.home()) / ".ray" / "auth_token").is_file()


def token_mode(env: Mapping[str, str], home: Path | None = None) -> dict[str, str] | None:
    """`env` with RAY_AUTH_MODE=token, or None when the user chose a mode or no token is at hand."""
    if "RAY_AUTH_MODE" in env or not token_at_hand(env, home):
        return None
    return {**env, "RAY_AUTH_MODE": "token"}


def auth_refusal(log: Path, offset: int) -> str | None:
    """One line saying the cluster refused the token, when Ray's log after `offset` shows it did."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            seen = handle.read()
    except OSError:
        return None
    if REFUSED not in seen:
        return None
    return f"its token authentication refused the driver (InvalidAuthToken: no token, or not the cluster's); {FIX}"
