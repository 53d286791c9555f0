"""Turning SDK exceptions into ProviderError without leaking the key."""

from __future__ import annotations

from collections.abc import Mapping

from rebench.models.messages import ProviderError, looks_like_context_overflow, parse_retry_after

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def redact(text: str, secret: str | None) -> str:
    """Remove a key (and its recognizable halves) from text bound for logs or events."""
    if not secret:
        return text
    for piece in (secret, secret[: len(secret) // 2], secret[len(secret) // 2 :]):
        if len(piece) >= 8:
            text = text.replace(piece, "[redacted]")
    return text


def retry_after_from(headers: Mapping[str, str] | None) -> float | None:
    if headers is None:
        return None
    ms = parse_retry_after(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    return parse_retry_after(headers.get("retry-after"))


REJECTED_KEY_STATUSES = frozenset({401, 403})
"""The provider refused the key or its permissions: the user's setup, wrong for every attempt alike."""


def status_error(
    provider: str,
    status: int,
    body: str,
    headers: Mapping[str, str] | None,
    secret: str | None,
    *,
    key_variable: str | None = None,
) -> ProviderError:
    detail = redact(" ".join(body.split())[:300], secret)
    overflow = status in (400, 413) and looks_like_context_overflow(body)
    if status in REJECTED_KEY_STATUSES:
        where = f"the API key in ${key_variable}" if key_variable else "the API key"
        return ProviderError(
            f"{provider} rejected {where} (HTTP {status}: {detail}); set a valid key and run again",
            retryable=False,
            status=status,
            key_variable=key_variable,
        )
    return ProviderError(
        f"{provider} returned HTTP {status}: {detail}",
        retryable=status in RETRYABLE_STATUSES,
        status=status,
        retry_after_s=retry_after_from(headers),
        context_overflow=overflow,
    )


def connection_error(provider: str, exc: Exception, secret: str | None) -> ProviderError:
    return ProviderError(
        f"{provider} connection failed: {redact(str(exc) or type(exc).__name__, secret)}", retryable=True
    )
