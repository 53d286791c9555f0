"""`--network none|full` on the Docker backend (real engine): `none` reaches nothing outside, `full`
reaches the outside world; a whole `full` run scores, and its gateway (the forwarder on the
container's loopback to the harness's Unix socket) serves both the agent and the scorer; the
attempt row and `attempts show` say `full`; nothing of the attempt's network is left afterwards.
What `full` must not reach is tests/adversarial/test_network_full.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import FIXTURE_ENVS, run_cli
from .docker_support import base_image, docker_engine, with_sandbox
from .network_support import outside_service

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def probe() -> Iterator[str]:
    """A program that says whether it reached a service beyond the host (tests/network_support.py)."""
    with outside_service() as address:
        yield (f"import socket\ntry:\n    conn = socket.create_connection({address!r}, timeout=5)\n"
               "    print(conn.recv(20).decode().strip())\n"
               "except OSError as exc:\n    print('unreachable', type(exc).__name__)\n")


def _left_behind() -> tuple[list[str], list[str]]:
    """The attempt networks on the engine and their host rules, less those of other processes' running
    attempts (tests running beside this one): what this test's runs made and left is among the rest."""
    from rebench.sandbox.docker.engine import LABEL_OWNER, owner_alive, owner_token

    networks = docker_engine().client.networks.list(filters={"label": "rebench.network"})
    ours = owner_token()
    others = {n.name for n in networks if (owner := (n.attrs.get("Labels") or {}).get(LABEL_OWNER, "")) != ours
              and owner_alive(owner)}
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    return ([n.name for n in networks if n.name not in others],
            [line for line in rules.splitlines() if "rebench-" in line and not any(name in line for name in others)])


def test_none_reaches_nothing_outside_and_full_does(probe: str) -> None:
    image = base_image(docker_engine())
    offline = with_sandbox(image, lambda sb: sb.exec(["python3", "-c", probe], timeout=30))
    assert offline.stdout.startswith("unreachable"), offline
    online = with_sandbox(image, lambda sb: sb.exec(["python3", "-c", probe], timeout=30), network="full")
    assert online.stdout.strip() == "OUTSIDE", online


def test_a_full_run_scores_and_its_gateway_serves_agent_and_scorer(tmp_path: Path, probe: str) -> None:
    docker_engine()
    before = _left_behind()
    envs = tmp_path / "envs"
    shutil.copytree(FIXTURE_ENVS / "gateway_echo", envs / "gateway_echo")
    ask = ("import json, os, urllib.request\n"
           "env = dict(l.strip().split('=', 1) for l in open(os.path.expanduser('~/api.env')))\n"
           "body = json.dumps({'model': env['REBENCH_GATEWAY_MODEL'], 'messages': [{'role': 'user', "
           "'content': 'hi'}]}).encode()\n"
           "r = urllib.request.Request(env['OPENAI_BASE_URL'] + '/chat/completions', data=body, "
           "headers={'Authorization': 'Bearer ' + env['OPENAI_API_KEY']})\n"
           "print('gateway', urllib.request.urlopen(r, timeout=20).status)\n"
           "open('answer.txt', 'w').write('echo done')\n")
    script = tmp_path / "full.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"python": probe}, {"python": ask}, {"score": {}},
                                                  {"submit": None}]}))
    db = tmp_path / "rebench.db"
    environ = {"REBENCH_ENVIRONMENTS": str(envs)}
    built = run_cli("envs", "build", "gateway_echo", "--backend", "docker", env=environ)
    assert built.returncode == 0, built.stderr
    result = run_cli("run", "--env", "gateway_echo", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--budget", "2m", "--backend", "docker", "--network", "full", "--db", str(db), env=environ)
    assert result.returncode == 0, result.stderr
    assert "network full" in result.stdout
    with sqlite3.connect(db) as connection:
        attempt = connection.execute("select status, final_raw, network from attempts").fetchall()
        metered = connection.execute("select meter, status from gateway_requests order by id").fetchall()
        outputs = [json.loads(data)["stdout"] for (data,) in
                   connection.execute("select data from events where kind = 'python' order by seq")]
    assert attempt == [("done", 1.0, "full")], (attempt, result.stdout)
    assert [s for m, s in metered if m == "agent"] == [200], metered
    assert [s for m, s in metered if m == "scorer"] == [200, 200], metered  # baseline and the agent's score call
    assert outputs[0].strip() == "OUTSIDE" and outputs[1].strip() == "gateway 200", outputs
    shown = run_cli("attempts", "show", "1", "--db", str(db))
    assert "network full (its own bridged network" in shown.stdout, shown.stdout
    assert _left_behind() == before


def test_gc_removes_the_network_and_host_rules_a_dead_harness_left() -> None:
    """A harness killed before it removed its attempt's network leaves the host closed to it (the rules
    stay); `rebench gc` removes both once the harness is gone, and keeps a live harness's."""
    from rebench.images import collect_garbage
    from rebench.sandbox.docker.engine import LABEL_OWNER, owner_token
    from rebench.sandbox.docker.network import AttemptNetwork

    engine = docker_engine()
    before = _left_behind()
    dead = AttemptNetwork.create(engine.client, 900_001, {LABEL_OWNER: f"{socket.gethostname()}:{os.getpid()}:1"})
    live = AttemptNetwork.create(engine.client, 900_002, {LABEL_OWNER: owner_token(os.getpid())})
    try:
        networks, rules = _left_behind()
        assert {dead.name, live.name} <= set(networks)
        assert sum(dead.name in rule for rule in rules) == 4 and sum(live.name in rule for rule in rules) == 4
        report = collect_garbage(engine)
        networks, rules = _left_behind()
        assert dead.name in report.removed_networks and dead.name not in networks
        assert not any(dead.name in rule for rule in rules)
        assert live.name in networks and sum(live.name in rule for rule in rules) == 4
    finally:
        live.remove()
        dead.remove()
    assert _left_behind() == before
