"""Finding environment folders and the files inside them.

Folder layout (every part but the metadata and scoring is optional):

    environment.toml     metadata (see metadata.py); each profile may cap what an attempt
                         copies to the host: `snapshot = { max_bytes = "16 GiB",
                         max_files = 100_000 }` (default 1 GiB and 100,000 entries, over
                         all of an attempt's snapshots; a `paper` profile sets at least
                         twice its largest legitimate submission)
    instructions.md      what the agent is told; `${name}` placeholders are filled
                         from the profile's params and the sandbox paths
    workspace/           the starting solution, copied to the solution folder
    workspace-P/         the starting solution of profile P, where it differs (copied
                         instead of workspace/)
    home/                read-only files copied into the agent's home
    scoring/score.py     the scoring program, defining `score(ctx) -> dict`;
                         copied read-only into the agent's home (visible, as in RE-Bench)
    protected/           held-out files, copied to the protected folder
    build.py             `python build.py --profile P --out DIR` generates assets into
                         DIR/home and DIR/protected (tiny corpora, small models, ...)
    reference/           the reference solution, laid over the workspace by the
                         `reference` agent only; never copied into an attempt otherwise
    requirements.txt     Python requirements of the environment's code
    requirements-P.txt   the requirements of profile P, where they differ (read instead of
                         requirements.txt, which is the fallback)
    system-packages.txt  Debian packages the Docker image installs with apt (e.g. rustc);
                         the local backend's preflight checks the host has what it needs
    tests/               the environment's own tests
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from string import Template

from rebench.environments.metadata import (
    METADATA_FILE,
    EnvironmentMetadata,
    Profile,
    final_rule_sentence,
    load_metadata,
)
from rebench.errors import ConfigError, EnvironmentNotFound
from rebench.harness_files import kit_version
from rebench.resources import environments_dir
from rebench.sandbox.base import SandboxPaths

_HASH_SKIP = {"__pycache__", ".pytest_cache", "tests"}


def default_environments_dir() -> Path:
    """The environments folder in force: `REBENCH_ENVIRONMENTS`, else this checkout's
    `environments/`, else the copy bundled into the installed package (`rebench.resources`)."""
    return environments_dir()


@dataclass(frozen=True)
class Environment:
    """An environment folder with its validated metadata."""

    root: Path
    metadata: EnvironmentMetadata
    overridden: frozenset[str] = frozenset()
    """Profiles whose params a run changed (`rebench run --env-param`, rebench.campaign.apply_env_params):
    their content hash covers the params, so assets and images built from them are their own."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def version(self) -> str:
        return self.metadata.version

    def profile(self, name: str) -> Profile:
        return self.metadata.profile(name)

    def part(self, name: str) -> Path | None:
        path = self.root / name
        return path if path.exists() else None

    @property
    def workspace_dir(self) -> Path | None:
        return self.part("workspace")

    def workspace_for(self, profile: str) -> Path | None:
        """`workspace-<profile>/`, else `workspace/`, else None: the profile's folder replaces the
        common one (it holds that profile's whole starting solution)."""
        self.profile(profile)
        return self.part(f"workspace-{profile}") or self.workspace_dir

    @property
    def home_dir(self) -> Path | None:
        return self.part("home")

    @property
    def scoring_dir(self) -> Path:
        path = self.root / "scoring"
        if not (path / "score.py").is_file():
            raise ConfigError(f"{self.root}: scoring/score.py is missing")
        return path

    @property
    def protected_dir(self) -> Path | None:
        return self.part("protected")

    @property
    def reference_dir(self) -> Path | None:
        return self.part("reference")

    @property
    def build_script(self) -> Path | None:
        return self.part("build.py")

    def requirements(self, profile: str) -> Path | None:
        """`requirements-<profile>.txt`, else `requirements.txt`, else None: the profile's file
        replaces the common one (it lists everything that profile installs)."""
        self.profile(profile)
        return self.part(f"requirements-{profile}.txt") or self.part("requirements.txt")

    def score_params(self, profile: str) -> dict[str, object]:
        """Parameters handed to score.py: the profile's params plus its name and timeout."""
        spec = self.profile(profile)
        return {
            **spec.params,
            "profile": profile,
            "environment": self.name,
            "version": self.version,
            "score_timeout_s": spec.score_timeout_s,
        }

    def instructions(self, profile: str, paths: SandboxPaths, *, final_rule: str | None = None) -> str:
        """The agent-facing task text with profile values and paths filled in; `final_rule_text`
        says how the final score is taken (the profile's rule unless the run chose another)."""
        source = self.root / "instructions.md"
        if not source.is_file():
            raise ConfigError(f"{self.root}: instructions.md is missing")
        spec = self.profile(profile)
        values: dict[str, object] = {
            **{k: v for k, v in spec.params.items()},
            "home": paths.home,
            "solution": paths.solution,
            "protected": paths.protected,
            "profile": profile,
            "score_timeout_s": int(spec.score_timeout_s),
            "direction": "lower" if spec.direction == "lower" else "higher",
            "final_rule_text": final_rule_sentence(final_rule or spec.final_score, spec.rescore),
        }
        try:
            return Template(source.read_text(encoding="utf-8")).substitute(values)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"{source}: placeholder {exc} has no value in profile {profile!r}") from None

    def mentions_final_rule(self) -> bool:
        """Whether instructions.md says how the final score is taken through `${final_rule_text}`."""
        source = self.root / "instructions.md"
        return source.is_file() and "${final_rule_text}" in source.read_text(encoding="utf-8")

    def content_hash(self, profile: str, extra: bytes = b"") -> str:
        """A stable hash of the folder (minus tests and caches), the profile and the environment
        kit's version (builds and scorers import it), so built assets and images are reused only
        while nothing they are made of changed."""
        digest = hashlib.sha256()
        digest.update(profile.encode())
        digest.update(extra)
        if profile in self.overridden:  # (declared params are covered by environment.toml's bytes below)
            digest.update(json.dumps(self.profile(profile).params, sort_keys=True, default=str).encode())
        digest.update(kit_version().encode())
        for path in sorted(self.root.rglob("*")):
            if any(part in _HASH_SKIP for part in path.relative_to(self.root).parts) or not path.is_file():
                continue
            digest.update(str(path.relative_to(self.root)).encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


class EnvironmentRegistry:
    """Discovers environments in a folder; no global state, one registry per caller."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_environments_dir()

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / METADATA_FILE).is_file())

    def get(self, name: str) -> Environment:
        folder = self.root / name
        if not (folder / METADATA_FILE).is_file():
            allowed = ", ".join(self.names()) or "(none found)"
            raise EnvironmentNotFound(f"unknown environment {name!r}; allowed: {allowed}")
        metadata = load_metadata(folder / METADATA_FILE)
        if metadata.name != name:
            raise ConfigError(
                f"{folder / METADATA_FILE}: field name: {metadata.name!r} must match the folder name {name!r}"
            )
        return Environment(root=folder, metadata=metadata)

    def all(self) -> list[Environment]:
        return [self.get(name) for name in self.names()]
