"""Environments: folders under `environments/`, each described by `environment.toml`."""

from rebench.environments.metadata import (
    Anchors,
    EnvironmentMetadata,
    Profile,
    Resources,
    load_metadata,
)
from rebench.environments.registry import Environment, EnvironmentRegistry, default_environments_dir

__all__ = [
    "Anchors",
    "Environment",
    "EnvironmentMetadata",
    "EnvironmentRegistry",
    "Profile",
    "Resources",
    "default_environments_dir",
    "load_metadata",
]
