"""What a Ray worker node needs before an attempt that the head has and the node may lack: the model
keys the attempt uses, and, for timing scores, anchors measured on the node's own hardware.

Keys. `rebench run` checks the agent's model key (and an environment gateway's upstream key) where it
runs, on the head; the worker's model clients and gateways read them from their own process's
environment. The head sends the variables the attempt needs, those it has, inside the task's
arguments, not in the job's runtime environment (which Ray's dashboard and job listings show), and
the worker sets them in its process's environment. That process is harness code only: sandboxes
start with a clean environment on every backend, so no agent sees them. A variable the head lacks is
not sent, and the node's own value, if any, is used.

Price tables. Costs are counted, and cost limits enforced, on the worker, so it prices calls by the
tables `rebench run` was given (`REBENCH_PRICES`, `--agent-arg prices=PATH`), which are files on the
head's disk: their text goes with the task and the worker reads it from a copy in its cache, named
by its digest. Where the head has no `REBENCH_PRICES`, the node's own setting holds.

Calibration. A calibration means something only on the hardware it was measured on, and the head's
hardware need not be any worker's, so on Ray the head measures nothing: each node calibrates a timing
environment (a `hardware_dependent` profile) before its first attempt of it in the campaign run,
where the head's database holds no calibration of that node's hardware fingerprint, exactly as
`rebench run` calibrates locally (`--no-calibrate` turns both off). Attempts of the same run on the
node wait for it under a lock in the node's cache (REBENCH_CACHE), then read the result kept there
(`ray-calibrations/`, one file per run, environment, profile and hardware). The row goes to the head
with the attempt's first batch, so later runs against that database reuse it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, ValidationError

from rebench.agents.base import AgentConfig
from rebench.environments.metadata import Gateway
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.models.names import KEY_VARIABLES
from rebench.models.prices import PRICES_ENV_VAR
from rebench.paths import cache_dir
from rebench.store.db import Store
from rebench.store.measurements import Calibration

CALIBRATIONS = "ray-calibrations"
"""Folder of a node's cache holding the calibrations its attempts made, per campaign run."""

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""An environment variable's name (`--agent-arg api_key_env=NAME` may be any)."""


def key_variables(config: AgentConfig, gateway: Gateway | None) -> set[str]:
    """The environment variables holding the keys the attempt's agent and environment gateway use."""
    variables: set[str] = set()
    if config.model:
        provider = config.model.partition("/")[0]
        if provider in KEY_VARIABLES:
            variables.add(KEY_VARIABLES[provider])  # an installed agent's gateway reads the provider's own
        named = config.args.get("api_key_env")
        if named:
            variables.add(named)
    if gateway is not None:
        provider = gateway.upstream.partition("/")[0]
        if provider in KEY_VARIABLES:
            variables.add(KEY_VARIABLES[provider])
    return {v for v in variables if _VARIABLE.fullmatch(v)}


def keys_to_send(config: AgentConfig, gateway: Gateway | None) -> dict[str, str]:
    """The head's values of those variables (the ones it has, non-empty)."""
    return {v: os.environ[v] for v in sorted(key_variables(config, gateway)) if os.environ.get(v, "").strip()}


def use_keys(keys: dict[str, str]) -> None:
    """On the worker: the head's keys in this process's environment, for the model clients to read."""
    for variable, value in keys.items():
        if _VARIABLE.fullmatch(variable) and isinstance(value, str):
            os.environ[variable] = value


PRICES_ARG = "prices"
_NODE_PRICES = os.environ.get(PRICES_ENV_VAR)
"""The node's own price table setting (this module is imported before any task changes it)."""


class PriceTables(BaseModel):
    """The text of the price tables an attempt is priced by, read on the head."""

    env: str | None = None
    """The table $REBENCH_PRICES names."""
    arg: str | None = None
    """The table of the agent's `prices` argument."""


def _table_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise RebenchError(f"price table {path!r} cannot be read: {exc.strerror or exc}") from None


def price_tables(config: AgentConfig) -> PriceTables:
    """On the head: the tables `rebench run` was given, by text."""
    named = os.environ.get(PRICES_ENV_VAR)
    argument = config.args.get(PRICES_ARG)
    return PriceTables(env=_table_text(named) if named else None, arg=_table_text(argument) if argument else None)


def _copy(text: str) -> str:
    folder = cache_dir() / "ray-prices"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.toml"
    if not path.is_file():
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(text)
        os.replace(partial, path)
    return str(path)


def use_price_tables(tables: PriceTables, config: AgentConfig) -> AgentConfig:
    """On the worker: $REBENCH_PRICES names a copy of the head's table (else the node's own setting),
    and the agent's `prices` argument a copy of the head's; the config to run the attempt with."""
    if tables.env is not None:
        os.environ[PRICES_ENV_VAR] = _copy(tables.env)
    elif _NODE_PRICES is not None:
        os.environ[PRICES_ENV_VAR] = _NODE_PRICES
    else:
        os.environ.pop(PRICES_ENV_VAR, None)
    if tables.arg is None:
        return config
    return config.model_copy(update={"args": {**config.args, PRICES_ARG: _copy(tables.arg)}})


class NodeCalibration(BaseModel):
    """A calibration row as a node keeps it in its cache and sends it to the head."""

    environment: str
    env_version: str
    profile: str
    hardware: str
    hardware_description: str
    start_raw: float
    reference_raw: float
    heldout_start_raw: float | None = None
    heldout_reference_raw: float | None = None
    samples: dict[str, Any]
    created_at: datetime

    def row(self) -> Calibration:
        return Calibration(**self.model_dump())


def _cached(path: Path) -> NodeCalibration | None:
    """The kept calibration, read without following a link; None when there is none or it is unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        try:
            return NodeCalibration.model_validate_json(handle.read(1 << 20))
        except ValidationError:
            return None


def _keep(path: Path, calibration: NodeCalibration) -> None:
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(calibration.model_dump_json())
    os.replace(partial, path)


def needs_calibration(store: Store, env: Environment, profile: str, hardware: str) -> bool:
    """The profile's scores are timings and `store` (the head's calibrations of this hardware) has none."""
    from rebench.calibration import resolve_anchors

    return env.profile(profile).hardware_dependent and resolve_anchors(store, env, profile, hardware).kind == "declared"


def kept_path(run: str, env: Environment, profile: str, hardware: str) -> Path:
    """Where this node keeps its calibration of `env`'s profile for campaign run `run` (folder made)."""
    folder = cache_dir() / CALIBRATIONS
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = hashlib.sha256(f"{run}\0{env.name}\0{env.version}\0{profile}\0{hardware}".encode()).hexdigest()[:32]
    return folder / f"{name}.json"


def calibrate_node(store: Store, env: Environment, profile: str, backend: str, run: str, hardware: str
                   ) -> NodeCalibration:
    """This node's calibration of `env`'s timing profile for campaign run `run` (where
    `needs_calibration`), measured here unless already kept, and added to the scratch `store`."""
    from rebench.calibration import calibration_repeats, measure_anchors, save_calibration

    path = kept_path(run, env, profile, hardware)
    with FileLock(str(path.with_suffix(".lock"))):
        kept = _cached(path)
        if kept is None:
            samples = asyncio.run(measure_anchors(env, profile, backend=backend,
                                                  repeats=calibration_repeats(env, profile), log=_log))
            row = save_calibration(store, env, profile, samples.start, samples.reference,
                                   heldout_start=samples.heldout_start, heldout_reference=samples.heldout_reference)
            kept = NodeCalibration.model_validate(row, from_attributes=True)
            _keep(path, kept)
            return kept
    with store.session() as session:
        session.add(kept.row())
    return kept


def _log(line: str) -> None:
    print(f"rebench calibration on this node: {line}", file=sys.stderr, flush=True)
