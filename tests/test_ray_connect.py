"""`rebench run --executor ray` joins the cluster before it writes anything: an address where no
Ray cluster answers is one line on stderr naming it, exit status 2, and no database file, within
`--ray-timeout` (Ray itself would retry for minutes, printing its core's warnings on stderr)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import run_cli, run_main

pytest.importorskip("ray")


def _run(db: Path, address: str, timeout: str) -> list[str]:
    return ["run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
            "--executor", "ray", "--ray-address", address, "--ray-timeout", timeout, "--db", str(db)]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections but speaks no Ray: the join itself has to time out."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


def test_an_address_where_nothing_listens_fails_in_one_line_before_any_row(
        fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, address = tmp_path / "ray.db", f"127.0.0.1:{_closed_port()}"
    code, _, err = run_main(_run(db, address, "5s"), capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert address in lines[0] and "no Ray cluster answers" in lines[0], err
    assert not db.exists()


@pytest.mark.slow
def test_a_port_that_is_not_ray_times_out_with_rays_output_in_a_file(fixture_envs: Path, tmp_path: Path,
                                                                     silent_port: int) -> None:
    db, address = tmp_path / "ray.db", f"127.0.0.1:{silent_port}"
    done = run_cli(*_run(db, address, "2s"), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)}, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and address in lines[0] and "within 2 s" in lines[0], done.stderr
    assert not db.exists()


def test_a_bad_ray_timeout_is_refused_in_one_line(fixture_envs: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ray.db"
    code, _, err = run_main(_run(db, "127.0.0.1:1", "soon"), capsys)
    assert code == 2 and "invalid --ray-timeout 'soon'" in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists()
