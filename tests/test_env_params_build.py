"""`rebench run --env-param KEY=VALUE` reaches the environment's build.py through the profile's params."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.campaign import apply_env_params
from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry

BUILD_PY = '''
from pathlib import Path
from rebench.kit import buildutil
args = buildutil.parse_args("a test build")
params = buildutil.profile_params(Path(__file__).parent, args.profile)
home, _, _ = buildutil.layout(args.out)
(home / "built_with.txt").write_text(params["secret_file"])
'''


def test_a_changed_param_is_what_build_py_reads_and_builds_apart(fixture_envs: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """build.py reads the params through the kit: it used to read environment.toml only, so a run's
    value never reached it, and the run used assets built from the declared value."""
    monkeypatch.setenv("REBENCH_CACHE", str(tmp_path / "cache"))
    (fixture_envs / "counter" / "build.py").write_text(BUILD_PY)
    declared = EnvironmentRegistry(fixture_envs).get("counter")
    changed, _credit = apply_env_params(declared, "tiny", {"secret_file": "other.txt"})
    changed_dir = assets_dir(changed, "tiny")
    declared_dir = assets_dir(declared, "tiny")
    assert changed_dir is not None and declared_dir is not None
    assert (changed_dir / "home" / "built_with.txt").read_text() == "other.txt"
    assert (declared_dir / "home" / "built_with.txt").read_text() == "answer.txt"
    assert changed_dir != declared_dir
    # the declared build keeps the hash it had before any run changed a param
    assert declared.content_hash("tiny") == EnvironmentRegistry(fixture_envs).get("counter").content_hash("tiny")
