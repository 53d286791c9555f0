"""What `rebench envs build|calibrate|noise|show` do: build an environment for a backend, measure its
anchors and its noise on this machine, and say which are in force. rebench.api re-exports the public ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rebench.observer import CalibrationResult, Observer
from rebench.store.opening import store_if_any, using_store

if TYPE_CHECKING:
    from rebench.environments.registry import Environment
    from rebench.noise import NoiseSummary
    from rebench.scoring.normalize import ResolvedAnchors
    from rebench.store.db import Store


def checked_environment(environment: str | Environment, profile: str) -> Environment:
    """The environment by name (or as given), checked to have `profile`."""
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    env.profile(profile)
    return env


def choose_backend(requested: str | None, observer: Observer | None = None) -> str:
    """`local` or `docker`; None picks docker when an engine answers, and warns when it falls back."""
    from rebench.sandbox.factory import resolve_backend

    chosen, warning = resolve_backend(requested)
    if warning:
        (observer or Observer()).warning(warning)
    return chosen


def build_environment(environment: str | Environment, profile: str = "tiny", backend: str | None = None, *,
                      observer: Observer | None = None, assets: Mapping[str, Path] | None = None) -> str:
    """Build what an attempt on this backend needs (virtualenv, assets, and the image on docker);
    a no-op when it is cached. Returns the backend it built for. `assets`: where the operator's
    files that the profile declares are (else the assets settings file; see
    rebench.environments.assets)."""
    from rebench.preflight import check

    env = checked_environment(environment, profile)
    check(env, profile, "build", assets=assets)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    build_for_backend(env, profile, chosen, observer, assets)
    return chosen


def build_for_backend(env: Environment, profile: str, backend: str, observer: Observer,
           assets: Mapping[str, Path] | None = None) -> None:
    from rebench.environments.build import assets_dir, local_python

    assets_dir(env, profile, log=observer.log, assets=assets)
    local_python(env, profile, log=observer.log)
    if backend == "docker":
        from rebench.images import build_environment_image  # the docker SDK: only for the docker backend

        build_environment_image(env, profile, log=observer.log, assets=assets)


def calibrate(environment: str | Environment, profile: str = "tiny", backend: str | None = "local",
              repeats: int | None = None, *, db: Store | Path | str | None = None, build: bool = True,
              observer: Observer | None = None) -> CalibrationResult:
    """Score the starting and the reference solution `repeats` times each on this machine and store
    the best of each (the median under rescore_best) as this hardware's anchors (see
    rebench.calibration for why). None: as many as the profile's final rule re-scores, else 3."""
    from rebench.errors import RebenchError

    if repeats is not None and repeats < 1:
        raise RebenchError(f"invalid --repeats {repeats}: must be at least 1")
    from rebench.preflight import check

    env = checked_environment(environment, profile)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    check(env, profile, "calibrate", backend=chosen)
    if build:
        build_for_backend(env, profile, chosen, observer)
    with using_store(db) as store:
        return calibrate_on(store, env, profile, chosen, repeats, observer)


def calibrate_on(store: Store, env: Environment, profile: str, backend: str, repeats: int | None,
               observer: Observer) -> CalibrationResult:
    from rebench.calibration import calibration_repeats, measure_anchors, save_calibration

    samples = asyncio.run(measure_anchors(env, profile, backend=backend,
                                          repeats=calibration_repeats(env, profile, repeats), log=observer.log))
    row = save_calibration(store, env, profile, samples.start, samples.reference,
                           heldout_start=samples.heldout_start, heldout_reference=samples.heldout_reference)
    result = CalibrationResult(environment=env.name, env_version=env.version, profile=profile,
                               hardware=row.hardware, hardware_description=row.hardware_description,
                               start_raw=row.start_raw, reference_raw=row.reference_raw,
                               heldout_start_raw=row.heldout_start_raw, heldout_reference_raw=row.heldout_reference_raw)
    observer.calibrated(result)
    return result


def anchors_in_use(environment: str | Environment, db: Store | Path | str | None = None) -> dict[str, ResolvedAnchors]:
    """Per profile, the anchors normalization uses on this machine: calibrated here, else declared."""
    from rebench.calibration import resolve_anchors
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    with store_if_any(db) as store:
        return {name: resolve_anchors(store, env, name) for name in env.metadata.profiles}


def measure_noise(environment: str | Environment, profile: str = "tiny", backend: str | None = "local",
                  n: int = 10, *, rescore_repeats: int | None = None, db: Store | Path | str | None = None,
                  build: bool = True, observer: Observer | None = None) -> NoiseSummary:
    """Score the starting and the reference solution n times each on this machine (the start also
    under the profile's final rule, see rebench.noise) and store the spread; nothing is stored
    when a call scores invalidly. `rescore_repeats` measures the start as if the profile
    re-scored it with that many calls."""
    from rebench.noise import check_n, final_rule_repeats, sample_noise, save_noise, summarize

    check_n(n)
    env = checked_environment(environment, profile)
    repeats = final_rule_repeats(env.profile(profile), rescore_repeats)
    observer = observer or Observer()
    chosen = choose_backend(backend, observer)
    if build:
        build_for_backend(env, profile, chosen, observer)
    with using_store(db) as store:  # opened first: a bad --db fails before minutes of scoring
        samples = asyncio.run(sample_noise(env, profile, backend=chosen, n=n, repeats=repeats, log=observer.log))
        return save_noise(store, summarize(env, profile, samples), samples)


def noise_measured(environment: str | Environment,
                   db: Store | Path | str | None = None) -> dict[str, NoiseSummary | None]:
    """Per profile, the newest noise measurement on this machine (None: not measured here)."""
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.noise import latest_noise

    env = EnvironmentRegistry().get(environment) if isinstance(environment, str) else environment
    with store_if_any(db) as store:
        return {name: latest_noise(store, env, name) for name in env.metadata.profiles}
