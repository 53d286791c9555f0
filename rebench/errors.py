"""Errors a user can cause and fix; the CLI prints them as one line and exits non-zero."""


class RebenchError(Exception):
    """A problem with the user's input or setup, reported as one line without a traceback."""


class ConfigError(RebenchError):
    """A malformed configuration or metadata file."""


class EnvironmentNotFound(RebenchError):
    """An environment name that is not in the environments folder."""


class SandboxError(RebenchError):
    """The sandbox could not be started or has died (an infrastructure problem)."""
