"""Model names as users type them: `provider/model`.

The provider decides which SDK talks to the model and which environment
variable holds its key. Keys are only ever read from the environment, at the
moment a client is built, and never copied into configuration or events.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel

from rebench.errors import RebenchError

Provider = Literal["openai", "anthropic", "openai-compatible"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic", "openai-compatible")

KEY_VARIABLES: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "openai-compatible": "OPENAI_COMPATIBLE_API_KEY",
}
"""Where each provider's key comes from. The openai-compatible key is optional
(a local server needs none); `--agent-arg api_key_env=NAME` names another variable."""


class ModelSpec(BaseModel):
    """A parsed `provider/model` name plus where to reach it; holds no secret."""

    provider: Provider
    name: str
    base_url: str | None = None
    key_variable: str

    @property
    def full_name(self) -> str:
        return f"{self.provider}/{self.name}"

    @property
    def key_required(self) -> bool:
        return self.provider != "openai-compatible"


def parse_model(text: str, *, base_url: str | None = None, key_variable: str | None = None) -> ModelSpec:
    """Parse `provider/model`; a bad name is a one-line error listing what is allowed."""
    provider, sep, name = text.strip().partition("/")
    if not sep or not name or provider not in PROVIDERS:
        raise RebenchError(
            f"invalid model {text!r}: use provider/model with provider one of {', '.join(PROVIDERS)}"
            " (e.g. anthropic/claude-sonnet-4-5, openai/gpt-5, openai-compatible/NAME with --base-url)"
        )
    if provider == "openai-compatible" and not base_url:
        raise RebenchError(f"model {text!r} needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise RebenchError(f"invalid base URL {base_url!r}: must start with http:// or https://")
    variable = key_variable or KEY_VARIABLES[provider]
    return ModelSpec(provider=provider, name=name, base_url=base_url, key_variable=variable)


def read_key(spec: ModelSpec) -> str | None:
    """The key from the environment, or None; an empty value counts as missing."""
    value = os.environ.get(spec.key_variable, "").strip()
    return value or None


def require_key(spec: ModelSpec) -> str | None:
    """The key, or a one-line error naming the variable to set (never the value)."""
    key = read_key(spec)
    if key is None and spec.key_required:
        raise RebenchError(
            f"model {spec.full_name!r} needs an API key: set the {spec.key_variable} environment variable"
        )
    return key
