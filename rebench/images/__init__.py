"""Docker images for attempts: the bootstrapped Debian, the base images, one image
per environment and profile (tagged by content hash), and garbage collection."""

from rebench.images.bootstrap import bootstrap_raw_image
from rebench.images.build import (
    build_base_image,
    build_environment_image,
    current_environment_image,
    default_ca_bundle,
)
from rebench.images.gc import GcReport, collect_garbage

__all__ = [
    "GcReport",
    "bootstrap_raw_image",
    "build_base_image",
    "build_environment_image",
    "collect_garbage",
    "current_environment_image",
    "default_ca_bundle",
]
