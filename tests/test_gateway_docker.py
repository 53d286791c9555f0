"""The gateway from inside a Docker sandbox (real engine, network none): the root forwarder relays
127.0.0.1:PORT to the harness's Unix socket; the agent holds only its token, no provider key, no
route anywhere else, and cannot read the scorer's token; the scorer reaches the gateway with no
process of the agent in the path. The model is the gateway_echo fixture's stdlib test double."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.environments.registry import EnvironmentRegistry
from rebench.gateway import GATEWAY_PORT, AttemptGateway
from rebench.store.db import Store
from rebench.store.models import Attempt

from .conftest import FIXTURE_ENVS, run_cli
from .docker_support import base_image, docker_engine, started_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FAKE_KEY = "sk-fake-harness-key-5f1d2c9a7b"
ASK = r"""
import json, sys, urllib.request, urllib.error
env = dict(l.strip().split("=", 1) for l in open(sys.argv[1]))
model = sys.argv[2] if len(sys.argv) > 2 else env["REBENCH_GATEWAY_MODEL"]
body = json.dumps({"model": model, "temperature": 0, "messages": [{"role": "user", "content": "ping"}]})
request = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
                                 headers={"Authorization": "Bearer " + env["OPENAI_API_KEY"]})
try:
    with urllib.request.urlopen(request, timeout=20) as response:
        print(response.status, json.loads(response.read())["choices"][0]["message"]["content"])
except urllib.error.HTTPError as exc:
    print(exc.code, json.loads(exc.read())["error"]["message"])
"""
HOLD = r"""
import socket, time
held = []
for _ in range(64):
    held.append(socket.create_connection(("127.0.0.1", 4141), timeout=5))
time.sleep(0.5)  # every one accepted and counted before we say so
print("held", len(held), flush=True)
time.sleep(120)
"""
NET = r"""
import socket
for host, port in (("1.1.1.1", 80), ("172.17.0.1", 2375), ("8.8.8.8", 53)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("reached", host)
    except OSError as exc:
        print("no route", host, type(exc).__name__)
"""


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


def test_inside_the_sandbox_only_the_gateway_and_only_with_the_agents_token(
        image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    store = Store(tmp_path / "gw.db")
    with store.session() as session:
        row = Attempt(environment="gateway_echo", profile="tiny", agent="test", budget_s=60.0)
        session.add(row)
        session.flush()
        attempt_id = row.id
    env = EnvironmentRegistry(FIXTURE_ENVS).get("gateway_echo")
    profile = env.profile("tiny")
    assert profile.gateway is not None

    async def body() -> dict[str, Any]:
        gateway = AttemptGateway(store, attempt_id, env, profile.gateway, assets=None, unix=True)
        await gateway.start()
        try:
            async with started_sandbox(image, gateway_socket=gateway.socket_path,
                                       gateway_port=GATEWAY_PORT) as sb:
                await gateway.install(sb)
                await sb.write_file("/tmp/ask.py", ASK.encode(), user="root", mode=0o644)
                await sb.write_file("/tmp/net.py", NET.encode(), user="root", mode=0o644)
                out: dict[str, Any] = {}
                out["agent"] = await sb.exec("python3 /tmp/ask.py $HOME/api.env")
                out["other_model"] = await sb.exec("python3 /tmp/ask.py $HOME/api.env gpt-4o")
                out["scorer_env"] = await sb.exec("cat /protected/gateway.env")
                out["socket"] = await sb.exec("ls /run/rebench/gateway; python3 -c \"import socket; "
                                              "socket.socket(socket.AF_UNIX).connect('/run/rebench/gateway/"
                                              "gateway.sock')\"")
                out["net"] = await sb.exec("python3 /tmp/net.py")
                out["env"] = await sb.exec("env")
                # a canary file proves the search reads the whole tree: it alone is found
                await sb.write_file("/var/tmp/canary", b"CANARY-7e1f", user="root", mode=0o600)
                out["grep"] = await sb.exec(f"grep -rlsI --exclude-dir=proc --exclude-dir=sys -e {FAKE_KEY} "
                                            f"-e CANARY-7e1f / ; grep -ls {FAKE_KEY} /proc/*/environ; true",
                                            user="root", timeout=120)
                out["forwarder"] = await sb.exec("stat -c %U /proc/$(cat /run/rebench/gateway-forwarder.ready)",
                                                 user="root")
                # the agent holds as many connections as it may: its next one is refused, the scorer's is not
                await sb.write_file("/tmp/hold.py", HOLD.encode(), user="root", mode=0o644)
                out["hold"] = await sb.exec("python3 /tmp/hold.py > /tmp/held 2>&1 & "
                                            "for i in $(seq 100); do [ -s /tmp/held ] && break; sleep 0.1; done; "
                                            "cat /tmp/held; python3 /tmp/ask.py $HOME/api.env")
                out["scorer_while_held"] = await sb.exec("python3 /tmp/ask.py /protected/gateway.env",
                                                         user="scorer")
                # the scorer's path: with every process of the agent gone, through the root forwarder
                await sb.kill_agent_processes()
                out["scorer"] = await sb.exec("python3 /tmp/ask.py /protected/gateway.env", user="scorer")
                return out
        finally:
            await gateway.close()

    out = asyncio.run(body())
    assert out["agent"].stdout.strip() == "200 echo ping", out["agent"]
    assert out["other_model"].stdout.startswith("404 ") and "'echo-1'" in out["other_model"].stdout
    assert out["scorer_env"].exit_code != 0 and "Permission denied" in out["scorer_env"].stderr
    assert out["socket"].exit_code != 0 and "Permission denied" in out["socket"].stderr
    assert [line.split()[0] for line in out["net"].stdout.splitlines()] == ["no", "no", "no"], out["net"].stdout
    assert FAKE_KEY not in out["env"].stdout and "OPENAI_API_KEY" not in out["env"].stdout
    assert out["grep"].stdout.split() == ["/var/tmp/canary"], out["grep"]
    assert out["forwarder"].stdout.strip() == "root"
    assert out["scorer"].stdout.strip() == "200 echo ping", out["scorer"]
    lines = out["hold"].stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0] == "held 64", out["hold"]
    assert lines[1].startswith("503 too many open connections"), out["hold"]
    assert out["scorer_while_held"].stdout.strip() == "200 echo ping", out["scorer_while_held"]
    with sqlite3.connect(tmp_path / "gw.db") as connection:
        metered = connection.execute("select meter, status from gateway_requests order by id").fetchall()
    assert metered == [("agent", 200), ("agent", 404), ("scorer", 200), ("scorer", 200)]


def test_a_docker_attempt_scores_through_the_gateway_and_hits_the_credit(tmp_path: Path) -> None:
    """The whole run on Docker: the scorer's calls (baseline, the agent's score call) and the agent's
    looped requests, past a credit set with --env-param."""
    docker_engine()
    envs = tmp_path / "envs"
    shutil.copytree(FIXTURE_ENVS / "gateway_echo", envs / "gateway_echo")
    loop = ("import json, os, urllib.request, urllib.error\n"
            "env = dict(l.strip().split('=', 1) for l in open(os.path.expanduser('~/api.env')))\n"
            "codes = []\n"
            "for i in range(5):\n"
            "    body = json.dumps({'model': env['REBENCH_GATEWAY_MODEL'], 'messages': [{'role': 'user', "
            "'content': 'q%d' % i}]}).encode()\n"
            "    r = urllib.request.Request(env['OPENAI_BASE_URL'] + '/chat/completions', data=body, "
            "headers={'Authorization': 'Bearer ' + env['OPENAI_API_KEY']})\n"
            "    try:\n"
            "        codes.append(urllib.request.urlopen(r, timeout=20).status)\n"
            "    except urllib.error.HTTPError as exc:\n"
            "        codes.append(exc.code)\n"
            "print('codes', codes)\n"
            "open('answer.txt', 'w').write('echo done')\n")
    script = tmp_path / "loop.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"python": loop}, {"score": {}}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    environ = {"REBENCH_ENVIRONMENTS": str(envs)}
    built = run_cli("envs", "build", "gateway_echo", "--backend", "docker", env=environ)
    assert built.returncode == 0, built.stderr
    result = run_cli("run", "--env", "gateway_echo", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--budget", "2m", "--backend", "docker", "--db", str(db), "--env-param", "credit=0.08",
                     env=environ)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        attempt = connection.execute("select status, final_raw from attempts").fetchall()
        metered = connection.execute("select meter, status from gateway_requests order by id").fetchall()
        (data,) = connection.execute("select data from events where kind = 'python'").fetchone()
    assert attempt == [("done", 1.0)]
    agent = [s for m, s in metered if m == "agent"]
    assert agent[0] == 200 and agent[-1] == 429, metered
    assert [s for m, s in metered if m == "scorer"] == [200, 200]
    assert "429" in json.loads(data)["stdout"]
