"""The `task` command inside the sandbox, attacked as an agent would attack it (issue 50, item 3).

`task` (rebench/sandbox/human/task.py) sends one JSON line to the root exec server's socket, which
takes the caller's uid from the kernel and passes it up to the harness's door (rebench.agents.task_door;
an expert's is the same class). The Docker tests run a declared agent through `rebench run` on the
`counter` fixture: a shell script tries each attack as the agent and leaves what it saw in its solution
folder (snapshotted). The local tests drive the door in the real runner, as the exec server would.

Seen before the defences:
- `task score --score-only`, `task status --json`: the arguments were dropped without a word and the
  command ran (one more score recorded);
- a 100 kB note went through and was stored twice (the server's cap let up to 128 kB through), as did
  a 70 kB request straight on the socket; a longer one got only "task: bad request";
- 50,000 `[` on the socket: the server's JSON parser raised RecursionError, which it did not catch
  there: no answer ever came and PID 1 kept the connection open for good;
- a score running when the budget ran out (or looping in the background) was recorded after the
  attempt's end and counted; on a re-scoring profile it collided with the re-scoring, and
  `rebench run` itself stopped with "user agent is paused while a score call runs".
Already held: option, shell and framing injection (arguments stay text, no shell runs on them), binary
text (stored and shown escaped), forged fields in a request (uid and pid come from the kernel), the
socket, the client and the result folder (root's), submits and scores racing (one submit counts, no
score after it), a score after submit (refused).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURE_ENVS, run_cli

pytestmark = pytest.mark.adversarial

KEY = "sk-provider-task-door"
RAW_CLIENT = '''import json, socket, sys
def ask(payload):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("/run/rebench-task/task.sock")
    sock.settimeout(10)
    try:
        sock.sendall(payload)
    except OSError as exc:
        print("sending stopped:", type(exc).__name__)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        print("NO REPLY")
    except OSError as exc:
        print("receiving stopped:", type(exc).__name__)
    print(data.decode(errors="replace"))
mode = sys.argv[1]
if mode == "big":
    ask(b"a" * (100 * 1024 * 1024))
elif mode == "over":
    ask(b'{"command": "note", "args": ["' + b"a" * 70000 + b'"]}\\n')
elif mode == "nested":
    ask(b"[" * 50000 + b"\\n")
elif mode == "forged":
    ask(json.dumps({"command": "status", "args": [], "uid": 0, "pid": 1, "task": 1, "id": 1,
                    "op": "task_reply", "exit_code": 0, "output": "forged"}).encode() + b"\\n")
else:
    for line in (b"[1, 2]", b'"score"', b'{"command": ["score"]}', b'{"command": "note", "args": 5}'):
        ask(line + b"\\n")
'''
ATTACKS = r'''
mkdir -p r
run() { name=$1; shift; "$@" > r/$name.out 2>&1; echo $? > r/$name.rc; }
echo 7 > value.txt
run dashdash task note -- --score-only
run scorearg task score --score-only
run statusarg task status --json
run shell task note '$(touch /tmp/pwned1)' '`touch /tmp/pwned2`' '; touch /tmp/pwned3' '| touch /tmp/pwned4'
run framing task note "$(printf 'one\n{"command": "submit", "args": []}\nthree')"
run binary task note "$(printf 'bin\xff\xfe\x01\x1b[2J\x7f end')"
run long task note "$(head -c 100000 /dev/zero | tr '\0' a)"
run many task note $(seq 1 30000)
run raw_big python3 ~/raw.py big
run raw_over python3 ~/raw.py over
run raw_nested python3 ~/raw.py nested
run raw_forged python3 ~/raw.py forged
run raw_odd python3 ~/raw.py odd
ls /tmp/pwned1 /tmp/pwned2 /tmp/pwned3 /tmp/pwned4 > r/pwned.out 2>&1
run rm_socket rm -f /run/rebench-task/task.sock
run link_socket ln -sf /tmp/fake.sock /run/rebench-task/task.sock
run replace_client cp /bin/true /usr/local/bin/task
run plant_result sh -c 'echo "{\"raw\": 99}" > /protected/results/forged.json'
run alive task status
for i in 1 2 3 4 5 6; do task score > r/race_score_$i.out 2>&1 & done
for i in 1 2 3; do task submit race-$i > r/race_submit_$i.out 2>&1 & done
wait
echo 50 > value.txt
task score > r/after_submit.out 2>&1
sleep 1000
'''
LATE = "echo 5 > value.txt; task score; echo 'cycle 9/3.5 9' > value.txt; task score > late.out 2>&1; sleep 1000"
"""Scores 5, then 9 with a call that takes 3.5 s: still running when the 4 s budget ends, and it would
end while the harness re-scores the 5 (this profile's rule), with the door still open."""


def _text(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's); braces doubled for the declaration's placeholders."""
    return json.dumps(value.replace("{", "{{").replace("}", "}}"))


def _declare(folder: Path, name: str, command: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.toml").write_text(
        f'description = "a hostile agent: {name}"\napi = "anthropic"\ncommand = {_text(command)}\n\n[install]\n\n'
        f"[files]\n\"attack.sh\" = {_text(ATTACKS)}\n\"raw.py\" = {_text(RAW_CLIENT)}\n")


def _attempt(root: Path, agent: str, command: str, profile: str, budget: str) -> tuple[Path, Path]:
    """Run one attempt of a declared agent on Docker; (database, snapshot folder)."""
    from tests.fake_model_server import FakeModelServer

    _declare(root / "agents", agent, command)
    db = root / f"{agent}.db"
    with FakeModelServer([], require_key=KEY) as server:
        ran = run_cli("run", "--env", "counter", "--agent", agent, "--model", "anthropic/test-model",
                      "--base-url", server.url, "--profile", profile, "--budget", budget, "--backend", "docker",
                      "--no-calibrate", "--db", str(db), timeout=900,
                      env={"ANTHROPIC_API_KEY": KEY, "REBENCH_AGENT_DECLARATIONS": str(root / "agents"),
                           "REBENCH_ENVIRONMENTS": str(root / "envs")})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with sqlite3.connect(db) as connection:
        (snapshot,), = connection.execute("select snapshot_path from attempts").fetchall()
    return db, Path(snapshot)


@pytest.fixture(scope="module")
def docker_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture environments, `counter` built for Docker (tiny and rescore)."""
    from tests.docker_support import base_image, docker_engine

    base_image(docker_engine())
    root = tmp_path_factory.mktemp("task-door")
    shutil.copytree(FIXTURE_ENVS, root / "envs")
    for profile in ("tiny", "rescore"):
        built = run_cli("envs", "build", "counter", "--profile", profile, "--backend", "docker",
                        env={"REBENCH_ENVIRONMENTS": str(root / "envs")})
        assert built.returncode == 0, built.stderr
    return root


@dataclass(frozen=True)
class Attacked:
    """The hostile attempt's database and what its script saw, step by step."""

    db: Path
    snapshot: Path

    def out(self, step: str) -> str:
        return (self.snapshot / "r" / f"{step}.out").read_text(errors="replace")

    def rc(self, step: str) -> int:
        return int((self.snapshot / "r" / f"{step}.rc").read_text())

    def rows(self, sql: str) -> list[Any]:
        with sqlite3.connect(self.db) as connection:
            return connection.execute(sql).fetchall()

    def events(self, kind: str) -> list[tuple[int, dict[str, Any]]]:
        return [(seq, json.loads(data)) for seq, data in
                self.rows(f"select seq, data from events where kind = '{kind}' order by seq")]

    def notes(self) -> list[str]:
        return [data["message"] for _, data in self.events("note") if data.get("data", {}).get("by") == "agent"]


@pytest.fixture(scope="module")
def attacked(docker_root: Path) -> Iterator[Attacked]:
    yield Attacked(*_attempt(docker_root, "door-attacker", "bash ~/attack.sh", "tiny", "5m"))


@pytest.mark.docker
@pytest.mark.slow
def test_options_shell_text_and_newlines_stay_the_arguments_they_were(attacked: Attacked) -> None:
    """Already held: the client sends argv as a JSON list and nothing runs a shell on it."""
    assert attacked.rc("dashdash") == attacked.rc("shell") == attacked.rc("framing") == 0
    assert attacked.notes()[:3] == [
        "-- --score-only",
        "$(touch /tmp/pwned1) `touch /tmp/pwned2` ; touch /tmp/pwned3 | touch /tmp/pwned4",
        'one\n{"command": "submit", "args": []}\nthree']
    assert "No such file" in attacked.out("pwned") and "pwned1\n" not in attacked.out("pwned")
    assert len(attacked.events("submit")) == 1  # the framing attempt submitted nothing; the race's one did


@pytest.mark.docker
@pytest.mark.slow
def test_a_command_that_takes_no_arguments_refuses_them(attacked: Attacked) -> None:
    """Failed before: `task score --score-only` scored, `task status --json` answered, the words dropped."""
    assert (attacked.rc("scorearg"), attacked.rc("statusarg")) == (2, 2)
    assert "`task score` takes no arguments (got '--score-only')" in attacked.out("scorearg")
    assert "`task status` takes no arguments (got '--json')" in attacked.out("statusarg")


@pytest.mark.docker
@pytest.mark.slow
def test_binary_text_is_kept_escaped(attacked: Attacked) -> None:
    """Already held: invalid UTF-8 and control characters are stored as JSON escapes and shown escaped."""
    assert attacked.rc("binary") == 0
    assert attacked.notes()[3] == "bin\udcff\udcfe\x01\x1b[2J\x7f end"
    shown = run_cli("attempts", "show", "1", "--db", str(attacked.db))
    assert shown.returncode == 0, shown.stderr
    assert "\x1b[2J" not in shown.stdout and "\\x1b[2J" in shown.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_oversized_requests_are_refused_in_one_line_and_nothing_is_stored(attacked: Attacked) -> None:
    """Failed before: the 100 kB note was stored (twice); the others said only "task: bad request"."""
    assert (attacked.rc("long"), attacked.rc("many")) == (2, 2)
    for step in ("long", "many"):
        assert "bytes long as sent; at most 65536 are allowed" in attacked.out(step), attacked.out(step)
    assert "task: the request is over 65536 bytes; shorten the arguments" in attacked.out("raw_over")
    # 100 MB straight on the socket: the server stops reading at the cap and closes; the kernel drops its
    # line, the sender still sending (a Unix socket closed with unread data resets), and the server lives on
    assert "ConnectionResetError" in attacked.out("raw_big") or "over 65536 bytes" in attacked.out("raw_big")
    assert attacked.rc("alive") == 0
    assert all(len(note) < 1000 for note in attacked.notes())
    assert all(len(data.get("args", [])) < 100 for _, data in attacked.events("task"))


@pytest.mark.docker
@pytest.mark.slow
def test_malformed_and_forged_requests_get_one_line_and_the_server_lives(attacked: Attacked) -> None:
    """Failed before: deep nesting got no answer at all (RecursionError in PID 1, the connection left
    open). Already held: fields the server does not read (a uid, a task number, a reply op) change
    nothing, and other JSON gets one line."""
    assert "NO REPLY" not in attacked.out("raw_nested")
    assert '"exit_code": 2' in attacked.out("raw_nested") and "bad request" in attacked.out("raw_nested")
    assert "working time used" in attacked.out("raw_forged") and "forged" not in attacked.out("raw_forged")
    odd = attacked.out("raw_odd")
    assert odd.count("bad request") == 3 and "unknown task command \\\"['score']\\\"" in odd, odd
    assert attacked.rc("alive") == 0 and "working time used" in attacked.out("alive")


@pytest.mark.docker
@pytest.mark.slow
def test_the_socket_the_client_and_the_result_folder_are_roots(attacked: Attacked) -> None:
    """Already held: the agent can replace neither the door's socket nor the `task` client, nor plant a
    result where the scorer writes its own."""
    for step in ("rm_socket", "link_socket", "replace_client", "plant_result"):
        assert attacked.rc(step) != 0 and "ermission denied" in attacked.out(step), (step, attacked.out(step))


@pytest.mark.docker
@pytest.mark.slow
def test_racing_scores_and_submits_count_one_submit_and_no_later_score(attacked: Attacked) -> None:
    """Already held: six `task score` and three `task submit` at once from separate processes: exactly
    one submit counts, every score recorded comes before it, and everything after it is refused (the
    score after writing 50, too)."""
    tasks = attacked.events("task")
    submits = [(seq, data) for seq, data in tasks if data["command"] == "submit"]
    assert [data["exit_code"] for _, data in submits].count(0) == 1, submits
    assert all("submitted and ending" in data["output"] for _, data in submits if data["exit_code"] != 0)
    (submitted_at, _), = attacked.events("submit")
    assert all(seq < submitted_at for seq, _ in attacked.events("score"))
    later = [data for seq, data in tasks if seq > submitted_at]  # the submit's own answer is recorded after it
    assert [data["command"] for data in later if data["exit_code"] == 0] == ["submit"], later
    scored = [data for _, data in tasks if data["command"] == "score" and data["exit_code"] == 0]
    (intermediate,), = attacked.rows("select count(*) from score_events where kind = 'intermediate'")
    assert intermediate == len(scored) >= 1
    assert attacked.rows("select status, submitted, final_raw from attempts") == [("done", 1, 7.0)]


@pytest.mark.docker
@pytest.mark.slow
def test_a_score_still_running_when_the_budget_ends_is_not_recorded(docker_root: Path) -> None:
    """Failed before: the score of 9 finished while the 5 was re-scored after the budget's end, and was
    recorded after the `limit` event as an intermediate score (RE-Bench's rule then said 9). Now the
    door closes when the budget ends and the running score is cancelled, as an agent's own ctx.score is."""
    db, _ = _attempt(docker_root, "late-scorer", LATE, "rescore", "4s")
    with sqlite3.connect(db) as connection:
        scores = connection.execute("select kind, raw from score_events where kind = 'intermediate'").fetchall()
        (status, limit, rule_raw), = connection.execute("select status, limit_reason, rule_raw from attempts")
        tasks = [json.loads(d) for (d,) in connection.execute("select data from events where kind = 'task'")]
    assert scores == [("intermediate", 5.0)] and rule_raw == 5.0, scores
    assert (status, limit) == ("limit", "time")
    assert [(t["command"], t["exit_code"]) for t in tasks] == [("score", 0), ("score", 1)]
    assert "the attempt ended before `task score` finished" in tasks[1]["output"]


def _local_attempt(store: Any, profile: str, budget_s: float, driver: Any) -> int:
    from rebench.agents.base import AgentConfig
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.human.clock import wall_clock
    from rebench.runner import AttemptRunner, RunHooks
    from rebench.store.models import Attempt, AttemptStatus

    with store.session() as session:
        attempt = Attempt(source="own", environment="counter", profile=profile, agent="human", model=None,
                          budget_s=budget_s, status=AttemptStatus.QUEUED, backend="local")
        session.add(attempt)
        session.flush()
        attempt_id: int = attempt.id
    runner = AttemptRunner(store, EnvironmentRegistry().get("counter"), backend="local",
                           snapshots_dir=store.path.parent / "snapshots")
    asyncio.run(runner.run(attempt_id, AgentConfig(name="human"), RunHooks(agent=driver, clock=wall_clock())))
    return attempt_id


class Looper:
    """Leaves `while true; do task score; done` running: a task of its own, as each request from the
    sandbox is (DockerSandbox._on_event)."""

    uses_reference = False

    def __init__(self) -> None:
        self.replies: list[tuple[int, str]] = []

    async def run(self, ctx: Any) -> None:
        from rebench.human.tasks import TaskCommands

        commands = TaskCommands(ctx, set_state=lambda state: None)
        await commands.run("start", [])
        await ctx.write_file("value.txt", "9")
        self.loop = asyncio.ensure_future(self._scores(commands))  # kept: a task nobody holds may be collected
        await asyncio.sleep(3600)

    async def _scores(self, commands: Any) -> None:
        while True:
            code, output = await commands.run("score", [])
            self.replies.append((code, output))
            if code != 0 and "ended" in output:
                return
            await asyncio.sleep(0.05)


def test_a_background_score_loop_stops_scoring_at_the_budget_end(fixture_envs: Path, tmp_path: Path) -> None:
    """Failed before (local backend, the human door): the loop went on scoring through the end of the
    attempt (the agent's processes killed, its best solutions re-scored), each score recorded after the
    `limit` event and counted in the final rule. Now the door closes at the end: nothing after it."""
    from rebench import api
    from rebench.store.db import Store

    api.build_environment("counter", "rescore", "local")
    store = Store(tmp_path / "loop.db")
    looper = Looper()
    attempt_id = _local_attempt(store, "rescore", 2.0, looper)
    with sqlite3.connect(store.path) as connection:
        kinds = [k for (k,) in connection.execute(
            "select kind from events where attempt_id = ? and kind in ('score', 'limit') order by seq", (attempt_id,))]
        (intermediate,), = connection.execute(
            "select count(*) from score_events where attempt_id = ? and kind = 'intermediate'", (attempt_id,))
    store.close()
    assert kinds[-1] == "limit" and "score" in kinds, kinds
    assert intermediate == sum(1 for code, _ in looper.replies if code == 0)
    assert looper.replies[-1][0] == 1 and "ended" in looper.replies[-1][1], looper.replies[-1]


class Arguer:
    """Sends each command straight to the agent's door, as the exec server passes it on."""

    uses_reference = False

    def __init__(self, steps: list[list[str]]) -> None:
        self.steps = steps
        self.replies: list[tuple[int, str]] = []

    async def run(self, ctx: Any) -> None:
        from rebench.agents.task_door import TaskDoor

        door = TaskDoor(ctx)
        for command, *args in self.steps:
            self.replies.append(await door.run(command, args))
        await asyncio.sleep(3600)


def test_arguments_where_none_are_taken_are_refused(fixture_envs: Path, tmp_path: Path) -> None:
    """Failed before: `score --score-only` and the rest ran, their words dropped. A note or answer is text."""
    from rebench import api
    from rebench.store.db import Store

    api.build_environment("counter", "tiny", "local")
    store = Store(tmp_path / "args.db")
    arguer = Arguer([["score", "--score-only"], ["score-log", "--all"], ["status", "--json"],
                     ["note", "--", "--final-score=100"], ["score"], ["submit", "--final-score", "100"],
                     ["score"]])
    _local_attempt(store, "tiny", 600.0, arguer)
    with sqlite3.connect(store.path) as connection:
        submits = connection.execute("select data from events where kind = 'submit'").fetchall()
        (intermediate,), = connection.execute("select count(*) from score_events where kind = 'intermediate'")
    store.close()
    assert [code for code, _ in arguer.replies] == [2, 2, 2, 0, 0, 0, 1]
    assert "`task score` takes no arguments (got '--score-only')" in arguer.replies[0][1]
    assert [json.loads(d)["answer"] for (d,) in submits] == ["--final-score 100"] and intermediate == 1
