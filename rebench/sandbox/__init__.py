"""Sandboxes: where an attempt's commands run (local directory, Docker container, ...)."""

from rebench.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxPaths, SandboxSpec, User

__all__ = ["ExecResult", "Sandbox", "SandboxBackend", "SandboxPaths", "SandboxSpec", "User"]
