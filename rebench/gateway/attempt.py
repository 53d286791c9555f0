"""The gateway as one attempt uses it: started before the environment is installed, announced in
two files, closed when the attempt ends.

- `~/api.env` (agent's home, readable by the agent): OPENAI_BASE_URL, OPENAI_API_KEY (the agent's token),
  REBENCH_GATEWAY_MODEL;
- `/protected/gateway.env` (root:protected 0640, the scorer's): the same names with the scorer's token.

Local backend: the gateway listens on 127.0.0.1 (a free port). Docker: on a Unix socket in a
host folder that the container mounts root-only (SandboxSpec.gateway_socket); a root forwarder
in the container relays 127.0.0.1:GATEWAY_PORT to it, so the container keeps no network.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebench.environments.metadata import Gateway
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.gateway.upstreams import Upstream, upstream_price
from rebench.models.names import parse_model, require_key
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.store.db import Store

if TYPE_CHECKING:  # the server (uvicorn, Starlette, httpx2) loads in start(): most attempts have no gateway
    from rebench.gateway.server import GatewayServer

GATEWAY_PORT = 4141
"""The gateway's port inside a Docker sandbox (the forwarder's); the local backend takes a free one."""
SOCKET_NAME = "gateway.sock"
API_ENV = "api.env"
GATEWAY_ENV = "gateway.env"
STATE_FILE = "gateway.json"


def check_gateway(gateway: Gateway | None) -> None:
    """Before anything starts: a provider upstream needs its key in the harness's environment
    (never the sandbox's), an openai-compatible one its base_url; one-line RebenchError otherwise."""
    if gateway is None:
        return
    provider, _, name = gateway.upstream.partition("/")
    if provider == "local":
        if not gateway.local_model:
            raise RebenchError(f"gateway upstream {gateway.upstream!r} needs local_model (a .py file)")
        return
    require_key(parse_model(f"{provider}/{name}", base_url=gateway.base_url))


def _load(gateway: Gateway, env_root: Path, assets: Path | None) -> tuple[Upstream, type[GatewayServer]]:
    """The upstream and the server class, in a thread: a local model loads slowly, and the server's
    first import (uvicorn, Starlette, httpx2: about 0.2 s) would block the event loop."""
    from rebench.gateway.server import GatewayServer
    from rebench.gateway.upstream_choice import make_upstream

    return make_upstream(gateway, env_root, assets), GatewayServer


def env_file(base_url: str, token: str, model: str) -> bytes:
    return (f"OPENAI_BASE_URL={base_url}\nOPENAI_API_KEY={token}\nREBENCH_GATEWAY_MODEL={model}\n").encode()


class AttemptGateway:
    """One attempt's gateway. `unix=True`: serve a Unix socket for a container's forwarder."""

    def __init__(self, store: Store | None, attempt_id: int, env: Environment, gateway: Gateway, *,
                 assets: Path | None, unix: bool, credit_usd: float | None = None,
                 state_dir: Path | None = None) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.env = env
        self.gateway = gateway
        self.assets = assets
        self.credit_usd = credit_usd
        self.unix = unix
        self.state_file = state_dir / STATE_FILE if state_dir is not None else None
        """A human attempt's gateway outlives no process, but its sandbox does: the next supervisor's
        gateway serves the same socket with the same tokens (kept here, in the host's gate folder)."""
        saved = self._saved()
        self.socket_dir: Path | None = None
        if unix:
            self.socket_dir = Path(saved["socket_dir"]) if saved else Path(tempfile.mkdtemp(prefix="rbgw-"))
            self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self.server: GatewayServer | None = None

    def _saved(self) -> dict[str, Any] | None:
        if self.state_file is None or not self.state_file.is_file():
            return None
        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    @classmethod
    def unmetered(cls, env: Environment, profile: str, backend: str) -> AttemptGateway | None:
        """A gateway for scoring outside an attempt (calibration, noise measurements): no rows, no
        credit for the scorer beyond the profile's; None when the profile has no gateway."""
        from rebench.environments.build import assets_dir

        gateway = env.profile(profile).gateway
        if gateway is None:
            return None
        return cls(None, 0, env, gateway, assets=assets_dir(env, profile, build=False), unix=backend != "local")

    def sandbox_spec(self, spec: SandboxSpec) -> SandboxSpec:
        """`spec` with what a container backend needs to forward to this gateway."""
        if self.socket_path is None:
            return spec
        return spec.model_copy(update={"gateway_socket": self.socket_path, "gateway_port": GATEWAY_PORT})

    @property
    def socket_path(self) -> str | None:
        return str(self.socket_dir / SOCKET_NAME) if self.socket_dir else None

    @property
    def base_url(self) -> str:
        port = GATEWAY_PORT if self.unix else (self.server.port if self.server else None)
        return f"http://127.0.0.1:{port}/v1"

    async def start(self) -> None:
        """Load the upstream (a local model) and the server's code in a thread, and listen."""
        upstream, server = await asyncio.to_thread(_load, self.gateway, self.env.root, self.assets)
        self.server = server(self.gateway, upstream, store=self.store, attempt_id=self.attempt_id,
                             price=upstream_price(self.gateway), credit_usd=self.credit_usd)
        saved = self._saved()
        if saved:
            self.server.use_tokens(saved["tokens"])
        elif self.state_file is not None:
            state = {"socket_dir": str(self.socket_dir) if self.socket_dir else None,
                     "tokens": {name: self.server.meters[name].token for name in ("agent", "scorer")}}
            self.state_file.write_text(json.dumps(state))
            self.state_file.chmod(0o600)
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)  # left by a supervisor that died
            await self.server.start_unix(self.socket_path)
        else:
            await self.server.start_tcp("127.0.0.1", 0)

    def on_scorer_busy(self, callback: Callable[[bool], None]) -> None:
        """Tell `callback` when scoring starts (True) and stops (False) waiting on the model: the scorer's
        meter or the `subject` meter (code a scoring call runs, on per-call tokens), whichever is busy;
        one True from the first of them busy to one False when neither is."""
        assert self.server is not None, "start() first"
        busy: set[str] = set()

        def hook(name: str) -> Callable[[bool], None]:
            def changed(on: bool) -> None:
                was = bool(busy)
                if on:
                    busy.add(name)
                else:
                    busy.discard(name)
                if bool(busy) != was:
                    callback(bool(busy))

            return changed

        for name in ("scorer", "subject"):
            self.server.meters[name].on_busy = hook(name)

    def open_call_token(self) -> str:
        """A token on the `subject` meter for one scoring call's code (GatewayServer.open_call_token)."""
        assert self.server is not None, "start() first"
        return self.server.open_call_token()

    def close_call_token(self, token: str) -> None:
        assert self.server is not None, "start() first"
        self.server.close_call_token(token)

    async def install(self, sandbox: Sandbox) -> None:
        """Write api.env (agent) and gateway.env (scorer) into the sandbox."""
        assert self.server is not None, "start() first"
        model = self.gateway.model
        agent, scorer = self.server.meters["agent"].token, self.server.meters["scorer"].token
        await sandbox.write_file(sandbox.paths.in_home(API_ENV), env_file(self.base_url, agent, model),
                                 user="root", mode=0o644)
        await sandbox.write_file(sandbox.paths.in_protected(GATEWAY_ENV), env_file(self.base_url, scorer, model),
                                 user="root", mode=0o640)

    async def close(self, *, keep: bool = False) -> None:
        """Stop serving; `keep`: the sandbox lives on (a human attempt's supervisor detaching), so its
        socket folder and tokens stay for the next gateway."""
        if self.server is not None:
            await self.server.close()
        if keep:
            return
        if self.state_file is not None:
            with contextlib.suppress(OSError):
                self.state_file.unlink()
        if self.socket_dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.socket_dir)

