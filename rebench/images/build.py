"""Building the rebench base images and one image per environment and profile.

Builds use host networking (hosts behind a proxy), take an extra CA bundle
(TLS-inspecting proxies) and a local wheelhouse (offline or proxied hosts). By
default the wheelhouse is filled with `pip download` on this host, which uses
this host's pip configuration (its proxy, certificates and local indexes), and
the image then installs from it without touching any index.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from rebench.environments.build import assets_dir, build_lock
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.harness_files import harness_files
from rebench.images.naming import (
    BASE_CPU,
    BASE_CUDA,
    LABEL_KIND,
    digest,
    dockerfiles_dir,
    environment_image,
    raw_image,
)
from rebench.images.wheels import fill_shared_wheelhouse, fill_wheelhouse, requirements, shared_requirements
from rebench.paths import cache_dir
from rebench.sandbox.docker import DockerEngine

Log = Callable[[str], None]
FALLBACK_BASE = "debian:bookworm-slim"


def _quiet(_: str) -> None:
    pass


def default_ca_bundle() -> Path | None:
    """`REBENCH_CA_BUNDLE`, else the bundle pip or requests are told to trust here, if any."""
    for variable in ("REBENCH_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    return None


def _ca_bytes(ca_bundle: Path | None) -> bytes:
    if ca_bundle is None:
        return b""
    if not ca_bundle.is_file():
        raise RebenchError(f"CA bundle {ca_bundle} does not exist; pass a PEM file or leave it out")
    return ca_bundle.read_bytes()


def _dockerfile(name: str) -> Path:
    path = dockerfiles_dir() / name
    if not path.is_file():
        raise RebenchError(f"{path} is missing; is REBENCH_DOCKERFILES pointing at the dockerfiles/ folder?")
    return path


def build_base_image(
    engine: DockerEngine,
    kind: str = "cpu",
    *,
    base_image: str | None = None,
    ca_bundle: Path | None = None,
    force: bool = False,
    log: Log = _quiet,
) -> str:
    """The CPU base (from `base_image`, default the bootstrapped Debian) or the CUDA
    base (from the CPU base). Tagged with a hash of everything in it; cached."""
    if kind not in ("cpu", "cuda"):
        raise RebenchError(f"unknown base image kind {kind!r}; allowed: cpu, cuda")
    if kind == "cuda":
        build_base_image(engine, "cpu", base_image=base_image, ca_bundle=ca_bundle, log=log)
    tag, parent, dockerfile, files = _base_recipe(engine, kind, base_image, ca_bundle)
    repository = tag.split(":", 1)[0]
    if force or engine.image_id(tag) is None:
        _build_base(engine, tag, parent, dockerfile, files, kind, log)
    engine.tag(tag, repository, "latest")
    return tag


def _base_recipe(
    engine: DockerEngine, kind: str, base_image: str | None, ca_bundle: Path | None
) -> tuple[str, str, Path, dict[str, bytes]]:
    """(tag, parent, Dockerfile, context files) of this checkout's base image of `kind`; the
    tag is a hash of all of them, so it names exactly what this checkout would build."""
    if kind == "cuda":
        parent = _base_recipe(engine, "cpu", base_image, ca_bundle)[0]
        dockerfile, repository, files = _dockerfile("base-cuda.Dockerfile"), BASE_CUDA, {}
    else:
        parent = base_image or (raw_image() if engine.image_id(raw_image()) else FALLBACK_BASE)
        dockerfile, repository = _dockerfile("base-cpu.Dockerfile"), BASE_CPU
        # The protected harness folder, /opt/rebench: the scoring helper and the environment kit.
        files = {f"harness/{name}": data for name, data in harness_files().items()}
        files["extra-ca.crt"] = _ca_bytes(ca_bundle)
    parent_id = engine.image_id(parent) or parent
    named = [part for name, data in sorted(files.items()) for part in (name.encode(), data)]
    tag = f"{repository}:{digest(dockerfile.read_bytes(), parent_id.encode(), *named)}"
    return tag, parent, dockerfile, files


def _build_base(
    engine: DockerEngine,
    tag: str,
    parent: str,
    dockerfile: Path,
    files: dict[str, bytes],
    kind: str,
    log: Log,
) -> None:
    log(f"building {tag} from {parent}")
    with tempfile.TemporaryDirectory(prefix="rebench-base-") as scratch:
        context = Path(scratch)
        shutil.copy(dockerfile, context / "Dockerfile")
        for name, data in files.items():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            (context / name).write_bytes(data)
        engine.build(context, "Dockerfile", tag, {"BASE_IMAGE": parent}, {LABEL_KIND: f"base-{kind}"}, log)


def _system_packages(env: Environment) -> bytes:
    """The environment's Debian packages (system-packages.txt, one or more per line, `#` comments),
    installed with apt from the base image's sources over the build's host network; empty when
    it has none. The file is part of the environment's content hash, so changing it rebuilds."""
    path = env.part("system-packages.txt")
    return path.read_bytes() if path else b""


def _link_tree(source: Path, dest: Path, leave_out: frozenset[str] = frozenset()) -> None:
    """Copy a folder into the build context, hard-linking files where possible (not the files
    named in `leave_out`)."""

    def copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(
        source,
        dest,
        copy_function=copy,
        dirs_exist_ok=True,
        ignore=lambda _, names: {n for n in names if n in leave_out or n in ("__pycache__", ".complete")},
    )


def environment_image_tag(env: Environment, profile: str, engine: DockerEngine, base: str) -> str:
    dockerfile = _dockerfile("env.Dockerfile").read_bytes()
    base_id = (engine.image_id(base) or base).encode()
    return environment_image(
        env.name, profile, env.content_hash(profile, extra=digest(dockerfile, base_id).encode())
    )


def base_kind(env: Environment, profile: str) -> str:
    return "cuda" if env.profile(profile).resources.gpus > 0 else "cpu"


def current_base_image(engine: DockerEngine, kind: str) -> str | None:
    """This checkout's base image of `kind` ("cpu" or "cuda") on the engine, or None when it is not
    built: the tag of its content hash, else (built from a --base-image of its own) what it tagged
    `latest`."""
    base = _base_recipe(engine, kind, None, default_ca_bundle())[0]
    if engine.image_id(base) is None:
        base = f"{BASE_CUDA if kind == 'cuda' else BASE_CPU}:latest"
    return base if engine.image_id(base) is not None else None


def current_environment_image(env: Environment, profile: str, engine: DockerEngine) -> str:
    """The tag an attempt should run, without building anything; RebenchError if it is missing.
    It derives from this checkout's base image (its content hash), not from `latest`, which
    may name an older base (one without the scorer's users) built by another checkout."""
    base = current_base_image(engine, base_kind(env, profile))
    if base is None:
        raise RebenchError(
            f"no rebench base image on this engine; run `rebench envs build {env.name} --profile {profile}`"
        )
    tag = environment_image_tag(env, profile, engine, base)
    if engine.image_id(tag) is None:
        raise RebenchError(
            f"image for {env.name} ({profile}) is missing or out of date; "
            f"run `rebench envs build {env.name} --profile {profile} --backend docker`"
        )
    return tag


def build_environment_image(
    env: Environment,
    profile: str,
    *,
    engine: DockerEngine | None = None,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    base_image: str | None = None,
    force: bool = False,
    assets: Mapping[str, Path] | None = None,
    log: Log = _quiet,
) -> str:
    """Build (or find cached) the image for one environment and profile; returns its tag.
    `assets`: the operator's files a profile declares (see rebench.environments.assets); only
    what build.py makes from them goes into the image."""
    engine = engine or DockerEngine.connect()
    env.profile(profile)
    if wheelhouse is None and os.environ.get("REBENCH_WHEELHOUSE"):
        wheelhouse = Path(os.environ["REBENCH_WHEELHOUSE"])
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise RebenchError(f"wheelhouse {wheelhouse} is not a directory")
    ca_bundle = ca_bundle or default_ca_bundle()
    base = build_base_image(
        engine, base_kind(env, profile), base_image=base_image, ca_bundle=ca_bundle, log=log
    )
    tag = environment_image_tag(env, profile, engine, base)
    if not force and engine.image_id(tag) is not None:
        log(f"{tag} is up to date")
        return tag
    # One builder per image across processes: a second one waits, then finds the first one's image.
    with build_lock(cache_dir() / "images" / tag.replace("/", "_").replace(":", "_")):
        if not force and engine.image_id(tag) is not None:
            log(f"{tag} was built by another process")
            return tag
        _build_environment_image(env, profile, engine, tag, base, wheelhouse, assets, log)
    return tag


def _build_environment_image(env: Environment, profile: str, engine: DockerEngine, tag: str, base: str,
                             wheelhouse: Path | None, assets: Mapping[str, Path] | None, log: Log) -> None:
    built = assets_dir(env, profile, log=log, assets=assets)
    offline = wheelhouse is None
    wheels = wheelhouse or fill_wheelhouse(env, profile, log)
    # An operator's own wheelhouse (offline builds) installs everything in the environment's layer.
    shared = fill_shared_wheelhouse(env, profile, log) if wheelhouse is None else None
    shared_names = frozenset(path.name for path in shared.iterdir()) if shared else frozenset[str]()
    with tempfile.TemporaryDirectory(prefix="rebench-env-", dir=cache_dir()) as scratch:
        context = Path(scratch)
        shutil.copy(_dockerfile("env.Dockerfile"), context / "Dockerfile")
        (context / "requirements.txt").write_bytes(requirements(env, profile))
        (context / "shared-requirements.txt").write_bytes(shared_requirements(env, profile) if shared else b"")
        (context / "system-packages.txt").write_bytes(_system_packages(env))
        for folder, source, leave_out in (("wheels", wheels, shared_names), ("shared-wheels", shared, frozenset())):
            (context / folder).mkdir()
            if source is not None:
                _link_tree(source, context / folder, leave_out)
        files = context / "env"
        files.mkdir()
        for part in ("workspace", "home", "scoring", "protected"):
            source = env.workspace_for(profile) if part == "workspace" else env.root / part
            if source is not None and source.is_dir():
                _link_tree(source, files / part)
        if built is not None:
            _link_tree(built, files / "assets")
        log(f"building {tag}")
        engine.build(
            context,
            "Dockerfile",
            tag,
            {
                "BASE_IMAGE": base,
                "ENVIRONMENT": env.name,
                "PROFILE": profile,
                "CONTENT_HASH": tag.rsplit("-", 1)[-1],
                "PIP_OFFLINE": "1" if offline else "",
            },
            {LABEL_KIND: "environment"},
            log,
        )
