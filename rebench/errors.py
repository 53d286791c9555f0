"""Errors a user can cause and fix; the CLI prints them as one line and exits non-zero.

The hierarchy, in one place so every layer raises and catches the same types:

- `RebenchError`: bad input or setup, one line, exit status 2.
  - `ConfigError`, `EnvironmentNotFound`: a configuration or an environment name.
  - `SandboxError`: the sandbox failed (an infrastructure problem, not the agent's doing);
    an attempt that meets one ends as `error` with source `infrastructure`.
    - `SandboxStartError`: no sandbox could be created or started (no image, an engine
      that refused, a failed health check, an image without the users rebench needs).
    - `SandboxDied`: a started sandbox is gone or stopped answering.
- `LimitExceeded`: not an error but the end of a budget (tokens, cost, disk); the
  attempt ends as `limit`.
"""


class RebenchError(Exception):
    """A problem with the user's input or setup, reported as one line without a traceback."""


class ConfigError(RebenchError):
    """A malformed configuration or metadata file."""


class EnvironmentNotFound(RebenchError):
    """An environment name that is not in the environments folder."""


class SandboxError(RebenchError):
    """The sandbox could not be started or has died (an infrastructure problem)."""


class SandboxStartError(SandboxError):
    """No sandbox could be created or started; nothing of it is left running."""


class SandboxDied(SandboxError):
    """A started sandbox is gone or stopped answering; its commands cannot run any more."""


class LimitExceeded(Exception):
    """A token, cost or disk limit was reached; the attempt ends as `limit`.

    Raised inside the agent (by its context, or by the sandbox when the agent broke a
    limit the engine cannot enforce), so it is not a `RebenchError`: nothing is wrong
    with the user's input."""

    def __init__(self, which: str, detail: str) -> None:
        super().__init__(f"{which} limit reached: {detail}")
        self.which = which
