"""Operator-provided assets: the weights and data a `paper` build needs but cannot download.

Each asset is declared per profile in `environment.toml` (see metadata.Asset). Where it lies on
this machine comes from `rebench envs build ENV --profile P --asset NAME=PATH`, else from the
settings file: `REBENCH_ASSETS` if set, else `$XDG_CONFIG_HOME/rebench/assets.toml` (default
`~/.config/rebench/assets.toml`), one table per environment:

    [fix_embedding]
    gpt2 = "/data/gpt2/model.safetensors"
    gpt2_xl = "/data/gpt2-xl/model.safetensors"

Every problem (an unknown name, a missing path, a wrong sha256) is one line naming the asset,
where to get it and how to pass it, raised before anything is built.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from rebench.environments.metadata import Asset
from rebench.environments.registry import Environment
from rebench.errors import RebenchError

_CHUNK = 1 << 22
_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, for this process


def settings_path() -> Path:
    if os.environ.get("REBENCH_ASSETS"):
        return Path(os.environ["REBENCH_ASSETS"]).expanduser()
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "rebench" / "assets.toml"


def parse_asset_options(values: Iterable[str]) -> dict[str, Path]:
    """`--asset NAME=PATH` options into {name: path}."""
    given: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise RebenchError(f"invalid --asset {value!r}: use NAME=PATH, e.g. --asset gpt2=/data/model.safetensors")
        given[name.strip()] = Path(path.strip()).expanduser()
    return given


def _settings(env: Environment) -> dict[str, Path]:
    path = settings_path()
    if not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get(env.name, {})
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise RebenchError(f"assets settings {path}: not valid TOML ({exc})") from None
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise RebenchError(f"assets settings {path}: [{env.name}] must map asset names to path strings")
    # Relative paths are relative to the settings file, so a folder of assets can move with it.
    return {name: (path.parent / Path(value).expanduser()) for name, value in table.items()}


def _how_to_provide(env: Environment, profile: str, asset: Asset) -> str:
    return (f"get it from {asset.source}, then pass --asset {asset.name}=PATH to "
            f"`rebench envs build {env.name} --profile {profile}` or set it under [{env.name}] in {settings_path()}")


def locate(env: Environment, profile: str, given: Mapping[str, Path] | None = None) -> dict[str, Path]:
    """Where each declared asset of the profile is said to be ({} for a profile without assets).
    Raises for a name the profile does not declare and for an asset given nowhere or not there."""
    declared = env.profile(profile).assets
    given = dict(given or {})
    names = [asset.name for asset in declared]
    for name in given:
        if name not in names:
            allowed = ", ".join(names) or "none"
            raise RebenchError(f"{env.name} ({profile}) has no asset {name!r}; allowed: {allowed}")
    from_settings = _settings(env) if declared else {}
    found = {}
    for asset in declared:
        path = given.get(asset.name) or from_settings.get(asset.name)
        if path is None:
            what = asset.description or asset.file
            raise RebenchError(f"{env.name} ({profile}) needs asset {asset.name!r} ({what}), which was not given: "
                               f"{_how_to_provide(env, profile, asset)}")
        if not path.exists():
            raise RebenchError(f"asset {asset.name!r} of {env.name} ({profile}): {path} does not exist; "
                               f"{_how_to_provide(env, profile, asset)}")
        found[asset.name] = path
    return found


def sha256_of(path: Path) -> str:
    """A file's sha256; for a folder, the sha256 of its listing ("<sha256>  <relative path>\\n"
    per file, sorted by path, as `sha256sum` prints it run inside the folder)."""
    if path.is_dir():
        lines = [f"{sha256_of(file)}  {file.relative_to(path).as_posix()}\n"
                 for file in sorted(path.rglob("*")) if file.is_file()]
        return hashlib.sha256("".join(lines).encode()).hexdigest()
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _verified:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        _verified[key] = digest.hexdigest()
    return _verified[key]


def verify(env: Environment, profile: str, given: Mapping[str, Path] | None = None) -> dict[str, Path]:
    """`locate`, then check each pinned asset's sha256; returns {name: path}."""
    found = locate(env, profile, given)
    for name, path in found.items():
        asset = env.profile(profile).asset(name)
        assert asset is not None
        if asset.sha256 == "unpinned":
            continue
        actual = sha256_of(path)
        if actual != asset.sha256:
            raise RebenchError(f"asset {name!r} of {env.name} ({profile}): {path} has sha256 {actual[:16]}…, "
                               f"expected {asset.sha256[:16]}… (a different or damaged file); "
                               f"{_how_to_provide(env, profile, asset)}")
    return found


def stage(env: Environment, profile: str, found: Mapping[str, Path], folder: Path) -> None:
    """Lay symbolic links folder/<file> -> the operator's paths: build.py reads them there and the
    originals are never copied (a GPT-2 XL checkpoint is 6 GB)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in found.items():
        asset = env.profile(profile).asset(name)
        assert asset is not None
        (folder / asset.file).symlink_to(path.resolve())
