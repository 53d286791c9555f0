"""rebench: run AI agents and human experts on RE-Bench-style ML research engineering environments."""

__version__ = "0.1.0"
