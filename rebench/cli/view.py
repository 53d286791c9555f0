"""`rebench view`: Inspect's log viewer on this database's attempts.

The attempts are exported (rebench.export.inspect_log) to a cache folder of this database,
then Inspect's own viewer (`inspect view start`) serves that folder until Ctrl-C. The viewer
has no login, so it binds to loopback unless told otherwise.

Inspect's server checks a requested path by its text only, then follows links and serves every
file under its folder, and serves any path at all to a holder of INSPECT_VIEW_AUTHORIZATION_TOKEN.
So the folder is a private one holding only the logs just exported (`_only_exports`); the viewer
starts there (Inspect loads the first `.env` up from its working folder, and the operator's may be
an agent's solution) with the token set empty (a `.env` does not override a set variable), and shows
every log as plain text (`--no-trust-content`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, console, err_console, open_store
from rebench.errors import RebenchError

START_TIMEOUT_S = 60.0


def view_folder(database: Path) -> Path:
    """Where a database's logs are exported for viewing: one folder per database file."""
    from rebench.paths import cache_dir

    key = hashlib.sha256(str(database.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "inspect-view" / key


def _private_folder(folder: Path) -> None:
    """A real folder only we can read (a link in its place is removed, never followed)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)


def _only_exports(folder: Path, written: set[str]) -> None:
    """Removes everything in the folder but the logs just written: stale logs, links, folders, other files."""
    for entry in folder.iterdir():
        if entry.name in written and entry.is_file() and not entry.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise RebenchError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port") from None


def _wait_until_serving(process: subprocess.Popen[bytes], host: str, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RebenchError(f"Inspect's viewer exited with status {process.returncode} before serving")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    process.terminate()
    raise RebenchError(f"Inspect's viewer did not start serving on {host}:{port} within {START_TIMEOUT_S:.0f} s")


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def view_command(
    campaign: Annotated[list[int] | None, typer.Option("--campaign", help="Only this campaign (repeatable).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to serve on (loopback unless --allow-remote).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to serve on.")] = 7575,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Serve a non-loopback --host without any login (anyone who reaches it reads every transcript).")] = False,
    db: DbOption = None,
) -> None:
    """Export the attempts and start Inspect's log viewer on them until Ctrl-C (needs the `inspect` extra)."""
    from rebench.export import require_inspect

    require_inspect("rebench view")
    from rebench.export.inspect_log import export_inspect

    if not _loopback(host) and not allow_remote:
        raise RebenchError(f"--host {host!r} is not a loopback address and the viewer has no login; "
                           "add --allow-remote to serve it anyway, or reach it through an SSH tunnel")
    _check_port(host, port)
    store = open_store(db, read_only=True)
    try:
        folder = view_folder(store.path)
        _private_folder(folder)
        summary = export_inspect(store, folder, campaigns=campaign or ())
    finally:
        store.close()
    _only_exports(folder, {Path(log.path).name for log in summary.logs})
    command = [sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(folder), "--host", host,
               "--port", str(port), "--no-trust-content"]
    if not _loopback(host):
        command.append("--unsafe-allow-unauthenticated")
    # set but empty: no token, and a `.env` (which never overrides a set variable) cannot give one
    env = {**os.environ, "INSPECT_VIEW_AUTHORIZATION_TOKEN": ""}
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, cwd=folder, env=env)
    signal.signal(signal.SIGTERM, _stop)  # a service manager's stop ends the viewer too, not only Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell started us ignoring it
    try:
        _wait_until_serving(process, "127.0.0.1" if host in ("0.0.0.0", "::") else host, port)
        shown = f"[{host}]" if ":" in host else host
        err_console.print(f"{len(summary.logs)} log(s) exported to {folder}", highlight=False, markup=False)
        console.print(f"Inspect's viewer: http://{shown}:{port}/ (Ctrl-C stops it)", highlight=False, markup=False)
        sys.stdout.flush()
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
