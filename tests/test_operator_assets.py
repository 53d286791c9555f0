"""Per-profile requirements, operator-provided assets and the preflight check, through the real
`rebench` command line on real files (a copy of the `counter` fixture given a build.py and
declared assets). The only stand-in is `nvidia-smi`, a script that lists GPUs this machine
does not have, where a test needs a GPU inventory."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry

from .conftest import REPO, run_cli

BUILD = '''"""Derive home/derived.txt from the operator's asset (upper-cased), as a real build would."""
import argparse
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--profile", required=True)
parser.add_argument("--out", required=True, type=Path)
parser.add_argument("--assets", type=Path)
args = parser.parse_args()
for part in ("home", "workspace", "protected"):
    (args.out / part).mkdir(parents=True, exist_ok=True)
if args.assets is not None:
    secret = (args.assets / "secret.txt").read_text()
    (args.out / "home" / "derived.txt").write_text(secret.upper())
'''

ORIGINAL = "the original weights\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _asset_block(sha256: str) -> str:
    return f'''
[[profiles.lower.assets]]
name = "weights"
file = "secret.txt"
sha256 = "{sha256}"
source = "https://example.org/weights.txt"
description = "the model's weights"
'''


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own: the run's shared one holds other workers' half-finished
    `.build-*` folders of the counter fixture at any moment, which a check for leftovers of this
    test's build cannot tell from its own."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("REBENCH_CACHE", str(cache))
    return cache


@pytest.fixture
def asset_env(fixture_envs: Path, tmp_path: Path, own_cache: Path) -> tuple[Path, Path]:
    """The counter fixture with a build.py, and its `lower` profile declaring one asset, built
    into `own_cache`; returns (environment folder, a correct asset file)."""
    folder = fixture_envs / "counter"
    (folder / "build.py").write_text(BUILD)
    with (folder / "environment.toml").open("a") as toml:
        toml.write(_asset_block(_sha(ORIGINAL)))
    asset = tmp_path / "weights.txt"
    asset.write_text(ORIGINAL)
    return folder, asset


def _built_folders(cache: Path) -> list[Path]:
    """The finished or half-finished builds of the counter fixture in this test's own cache."""
    root = cache / "assets" / "counter"
    return sorted(root.iterdir()) if root.exists() else []


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.slow
def test_profile_requirements_file_replaces_the_common_one(fixture_envs: Path, isolated_cache: Path) -> None:
    """`requirements-<profile>.txt` is what that profile's virtualenv installs (and keys it);
    other profiles keep `requirements.txt`."""
    from rebench.environments.build import venv_dir

    folder = fixture_envs / "counter"
    (folder / "requirements.txt").write_text("")
    (folder / "requirements-lower.txt").write_text("PyYAML\n")
    lower = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local")
    assert lower.returncode == 0, lower.stderr
    assert "requirements-lower.txt" in lower.stdout + lower.stderr
    tiny = run_cli("envs", "build", "counter", "--profile", "tiny", "--backend", "local")
    assert tiny.returncode == 0, tiny.stderr
    assert "requirements-lower.txt" not in tiny.stdout + tiny.stderr

    env = EnvironmentRegistry(fixture_envs).get("counter")
    assert env.requirements("lower") == folder / "requirements-lower.txt"
    assert env.requirements("tiny") == folder / "requirements.txt"
    before = venv_dir(env, "lower")
    assert before != venv_dir(env, "tiny") and (before / ".complete").exists()
    (folder / "requirements-lower.txt").write_text("PyYAML>=5\n")
    assert venv_dir(env, "lower") != before  # a changed file is a new virtualenv, never a stale one


def test_profile_requirements_go_into_the_wheelhouse(fixture_envs: Path) -> None:
    """The image installs from the wheelhouse, filled from the profile's own requirements file."""
    from rebench.images.wheels import fill_wheelhouse

    folder = fixture_envs / "counter"
    (folder / "requirements-lower.txt").write_text("PyYAML\n")
    env = EnvironmentRegistry(fixture_envs).get("counter")
    lower = fill_wheelhouse(env, "lower")
    assert any(p.name.lower().startswith("pyyaml") for p in lower.iterdir()), list(lower.iterdir())
    tiny = fill_wheelhouse(env, "tiny")
    assert tiny != lower and not any(p.suffix == ".whl" for p in tiny.iterdir())


def test_missing_asset_is_one_line_naming_it_and_nothing_is_built(asset_env: tuple[Path, Path],
                                                                   own_cache: Path) -> None:
    result = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local")
    assert result.returncode == 2
    line = _error_line(result.stderr)
    assert "'weights'" in line and "https://example.org/weights.txt" in line and "--asset weights=PATH" in line
    assert _built_folders(own_cache) == []


def test_wrong_asset_is_refused_by_its_sha256(asset_env: tuple[Path, Path], tmp_path: Path,
                                              own_cache: Path) -> None:
    wrong = tmp_path / "other.txt"
    wrong.write_text("some other file\n")
    result = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local",
                     "--asset", f"weights={wrong}")
    assert result.returncode == 2
    line = _error_line(result.stderr)
    assert "'weights'" in line and "sha256" in line and str(wrong) in line
    assert _built_folders(own_cache) == []


@pytest.mark.parametrize(("option", "expected"), [
    ("nonsense", "invalid --asset 'nonsense'"),
    ("other=/tmp", "has no asset 'other'; allowed: weights"),
    ("weights=/no/such/file", "/no/such/file does not exist"),
])
def test_bad_asset_options(asset_env: tuple[Path, Path], option: str, expected: str) -> None:
    result = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local", "--asset", option)
    assert result.returncode == 2
    assert expected in _error_line(result.stderr)


def test_asset_given_on_the_command_line_is_built_from_not_kept(asset_env: tuple[Path, Path],
                                                                 own_cache: Path) -> None:
    _folder, asset = asset_env
    result = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local",
                     "--asset", f"weights={asset}")
    assert result.returncode == 0, result.stderr
    (built,) = _built_folders(own_cache)
    assert (built / "home" / "derived.txt").read_text() == ORIGINAL.upper()
    kept = [p for p in built.rglob("*") if p.is_file() and ORIGINAL in p.read_text(errors="replace")]
    assert kept == [] and not any(p.is_symlink() for p in built.rglob("*"))
    assert (built / "operator-assets.json").read_text().count(_sha(ORIGINAL)) == 1
    again = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local")
    assert again.returncode == 0, again.stderr  # built: the asset is not needed again


def test_settings_file_names_the_asset(asset_env: tuple[Path, Path], tmp_path: Path,
                                       own_cache: Path) -> None:
    """REBENCH_ASSETS names a TOML file with one table per environment; a relative path is
    relative to that file."""
    _folder, asset = asset_env
    settings = tmp_path / "assets.toml"
    settings.write_text(f'[counter]\nweights = "{asset.name}"\n')
    result = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local",
                     env={"REBENCH_ASSETS": str(settings)})
    assert result.returncode == 0, result.stderr
    (built,) = _built_folders(own_cache)
    assert (built / "home" / "derived.txt").read_text() == ORIGINAL.upper()
    settings.write_text("[counter\n")
    broken = run_cli("envs", "build", "counter", "--profile", "lower", "--backend", "local",
                     env={"REBENCH_ASSETS": str(settings)})
    assert broken.returncode == 0, broken.stderr  # already built: the settings are not read


def test_run_without_the_assets_refuses_before_any_row(asset_env: tuple[Path, Path], db_path: Path) -> None:
    started = time.monotonic()
    result = run_cli("run", "--env", "counter", "--profile", "lower", "--agent", "reference",
                     "--budget", "1m", "--backend", "local", "--db", str(db_path))
    assert result.returncode == 2
    assert "needs asset 'weights'" in _error_line(result.stderr)
    assert time.monotonic() - started < 30
    if db_path.exists():
        with sqlite3.connect(db_path) as db:
            assert db.execute("select count(*) from attempts").fetchone() == (0,)


def test_paper_kernel_without_a_gpu_refuses_at_once(db_path: Path, tmp_path: Path) -> None:
    """What a new user tries first: no calibration, no build, one line within seconds."""
    empty_path = tmp_path / "bin"
    empty_path.mkdir()  # no nvidia-smi on PATH, whatever this machine has
    for argv in (["run", "--env", "triton_cumsum", "--profile", "paper", "--agent", "reference",
                  "--budget", "1m", "--backend", "local", "--db", str(db_path)],
                 ["envs", "calibrate", "triton_cumsum", "--profile", "paper", "--db", str(db_path)]):
        started = time.monotonic()
        result = run_cli(*argv, env={"REBENCH_ENVIRONMENTS": str(REPO / "environments"),
                                     "PATH": f"{empty_path}:/usr/bin:/bin"})
        elapsed = time.monotonic() - started
        assert result.returncode == 2, result.stderr
        line = _error_line(result.stderr)
        assert "triton_cumsum (paper) needs 1 GPU(s)" in line and "--profile tiny" in line
        assert elapsed < 20, elapsed  # about a second; generous for a loaded CI machine
    if db_path.exists():
        with sqlite3.connect(db_path) as db:
            assert db.execute("select count(*) from calibrations").fetchone() == (0,)


def test_paper_fix_embedding_build_without_assets_names_them(own_cache: Path) -> None:
    result = run_cli("envs", "build", "fix_embedding", "--profile", "paper", "--backend", "local",
                     env={"REBENCH_ENVIRONMENTS": str(REPO / "environments"),
                          "REBENCH_ASSETS": str(own_cache / "no-settings.toml")})
    assert result.returncode == 2
    line = _error_line(result.stderr)
    assert "needs asset 'gpt2'" in line and "huggingface.co/openai-community/gpt2/" in line
    assert "ModuleNotFoundError" not in result.stderr
    made = list(own_cache.glob("venvs/*")) + list(own_cache.glob("assets/*/*"))
    assert made == [], "no virtualenv or assets may be made for a build that cannot start"


FAKE_NVIDIA_SMI = """#!/bin/sh
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
"""


@pytest.fixture
def one_gpu(tmp_path: Path) -> dict[str, str]:
    """PATH with an `nvidia-smi` that lists one GPU: a stand-in for GPU hardware this machine lacks."""
    folder = tmp_path / "fake-driver"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    import os

    return {"PATH": f"{folder}:{os.environ['PATH']}"}


@pytest.mark.parametrize(("gpus", "expected"), [
    (None, "pass the device ids the scheduler may lease, e.g. --gpus 0"),
    ("3", "invalid --gpus 3: this machine has GPU ids 0"),
])
def test_gpu_profile_checks_gpus_against_the_inventory(fixture_envs: Path, one_gpu: dict[str, str],
                                                       db_path: Path, gpus: str | None, expected: str) -> None:
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text().replace("[profiles.lower]\nresources = { gpus = 0",
                                             "[profiles.lower]\nresources = { gpus = 1"))
    argv = ["run", "--env", "counter", "--profile", "lower", "--agent", "reference", "--budget", "1m",
            "--backend", "local", "--db", str(db_path)]
    result = run_cli(*argv, *(["--gpus", gpus] if gpus else []), env=one_gpu)
    assert result.returncode == 2
    assert expected in _error_line(result.stderr)
    two = toml.read_text().replace("gpus = 1", "gpus = 2")
    toml.write_text(two)
    short = run_cli(*argv, "--gpus", "0", env=one_gpu)
    assert "needs 2 GPU(s) but this machine has 1" in _error_line(short.stderr)


def test_gpu_profile_on_the_local_backend_needs_a_cuda_pytorch(fixture_envs: Path, one_gpu: dict[str, str],
                                                               db_path: Path) -> None:
    """The inventory lists a GPU (stand-in), but the local backend would run the harness's CPU
    PyTorch (this machine's): refused before calibrating or building, naming the fix."""
    folder = fixture_envs / "counter"
    toml = folder / "environment.toml"
    toml.write_text(toml.read_text().replace("[profiles.lower]\nresources = { gpus = 0",
                                             "[profiles.lower]\nresources = { gpus = 1"))
    (folder / "requirements-lower.txt").write_text("torch\n")
    result = run_cli("run", "--env", "counter", "--profile", "lower", "--agent", "reference", "--budget", "1m",
                     "--backend", "local", "--gpus", "0", "--db", str(db_path), env=one_gpu)
    assert result.returncode == 2
    line = _error_line(result.stderr)
    assert "PyTorch" in line and "CPU build" in line and "--backend docker" in line
    calibrate = run_cli("envs", "calibrate", "counter", "--profile", "lower", "--backend", "local",
                        "--db", str(db_path), env=one_gpu)
    assert "CPU build" in _error_line(calibrate.stderr)


@pytest.mark.slow
def test_scaling_law_paper_build_reads_the_openwebtext_folder(tmp_path: Path, isolated_cache: Path) -> None:
    """An unpinned folder asset (made by the operator's `python -m rebench.kit.owt`): a small one
    of random GPT-2 token ids here. The build copies it into place and records its sha256."""
    import numpy as np

    from rebench.environments.assets import sha256_of

    owt = tmp_path / "owt"
    owt.mkdir()
    rng = np.random.default_rng(0)
    for name in ("train", "val"):
        rng.integers(0, 50257, 5000, dtype=np.uint16).tofile(owt / f"{name}.bin")
    result = run_cli("envs", "build", "small_scaling_law", "--profile", "paper", "--backend", "local",
                     "--asset", f"openwebtext={owt}", env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")},
                     timeout=600)
    assert result.returncode == 0, result.stderr
    (built,) = (isolated_cache / "assets" / "small_scaling_law").glob("paper-*")
    for name in ("train", "val"):
        assert (built / "home" / "data" / f"{name}.bin").read_bytes() == (owt / f"{name}.bin").read_bytes()
    assert sha256_of(owt) in (built / "operator-assets.json").read_text()
