"""`rebench view` against an agent that writes for the operator's browser, and against requests that
reach past the exported logs (issue 50, item 3).

Browser: every field an agent fills (commands and output, files, model text and tool calls, notes,
submission, score messages, error, names, an installed agent's gateway bodies with media by URL)
holds HTML, script, SVG, CSS, Markdown and terminal links that would run script or fetch a beacon.
Held already: the logs say `trust_content = False`, so the viewer shows all of it as text, and its
Content-Security-Policy allows no other origin. With the logs' flag flipped to True the test fails:
the viewer builds links to the agent's URLs (Markdown images, media by URL, citations), a click from
a request. The viewer now also forces plain text for every log in its folder (`--no-trust-content`),
so the guarantee is not each log's own flag.

Server: Inspect's server checks a requested path by its text (no `..`, under the log folder) and
then follows links, serves every file in the folder (recursively), and drops that check entirely when
the environment or a `.env` in the working folder carries INSPECT_VIEW_AUTHORIZATION_TOKEN. Seen to
succeed before the defence: a link left in the view folder served /etc/passwd and the database's
bytes; a link in place of the folder had the export write into its target and delete the `*.eval`
files there; with the token (from the environment or an agent's `.env`) `/api/log-bytes//etc/passwd`
served the file. Encoded, double-encoded, absolute, backslash and sibling-prefix paths, foreign Host
and Origin headers, and non-loopback hosts without `--allow-remote` were held.

Real parts: a database with the rows an attempt leaves, `rebench view` as the operator starts it
(Inspect's own server), Debian's Chromium driven by Playwright, raw HTTP requests.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlsplit

import psutil
import pytest

from tests.conftest import FIXTURE_ENVS, REPO, run_main
from tests.test_inspect_export import _free_port, _read_url

from .hostile_html import hostile_html_database

pytestmark = [pytest.mark.adversarial, pytest.mark.slow]

SECRETS = (b"root:x:0:0", b"SQLite format 3", b"SIBLING-SECRET-5c2e")


@dataclass
class Viewer:
    url: str
    process: subprocess.Popen[str]
    folder: Path
    db: Path
    ids: dict[str, int]


class Beacon:
    """A server the agent could read later: it records every path it is asked for."""

    def __init__(self) -> None:
        asked = self.asked = list[str]()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                self.send_response(200)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _folder_of(db: Path, cache: Path) -> Path:
    """Where `rebench view` exports a database's logs (rebench.cli.view.view_folder, under this cache)."""
    from rebench.cli.view import view_folder

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REBENCH_CACHE", str(cache))
        return view_folder(db)


@contextmanager
def _viewer(db: Path, ids: dict[str, int], root: Path, *, env: dict[str, str] | None = None,
            cwd: Path = REPO) -> Iterator[Viewer]:
    cache = root / "cache"
    port = _free_port()
    full = {**os.environ, "REBENCH_CACHE": str(cache), "XDG_DATA_HOME": str(root / "data"),
            "REBENCH_ENVIRONMENTS": str(FIXTURE_ENVS), "PYTHONPATH": str(REPO), **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "view", "--db", str(db), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=cwd,
                               start_new_session=True)
    try:
        yield Viewer(_read_url(process, 180), process, _folder_of(db, cache), db, ids)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _get(viewer: Viewer, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A raw request: the path goes out byte for byte (no client normalizes `..` or encodings)."""
    address = urlsplit(viewer.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def beacon() -> Iterator[Beacon]:
    server = Beacon()
    yield server
    server.server.shutdown()


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory, beacon: Beacon) -> Iterator[Viewer]:
    """The hostile database on `rebench view`, started after links to outside files were left in the
    folder it serves (a stale export's name too), and a look-alike folder beside it."""
    root = tmp_path_factory.mktemp("viewer")
    db = root / "hostile.db"
    ids = hostile_html_database(db, beacon.url)
    folder = _folder_of(db, root / "cache")
    folder.mkdir(parents=True)
    (folder / "passwd.eval").symlink_to("/etc/passwd")
    (folder / "store.json").symlink_to(db)
    (folder / "etc").symlink_to("/etc", target_is_directory=True)
    (folder / "inner").mkdir()
    (folder / "inner" / "db.eval").symlink_to(db)
    sibling = folder.with_name(folder.name + "-sibling")
    sibling.mkdir()
    (sibling / "data.json").write_text("SIBLING-SECRET-5c2e")
    with _viewer(db, ids, root) as started:
        yield started


def test_every_agent_field_is_text_in_chromium(viewer: Viewer, beacon: Beacon) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    logs = {("gateway" if "_claude-code-" in p.name else "attempt"): p.name for p in viewer.folder.glob("*.eval")}
    assert len(logs) == 2, logs
    seen: list[str] = []
    found: list[str] = []
    shown: dict[str, str] = {}
    beacon_host = urlsplit(beacon.url).netloc
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("request", lambda request: seen.append(request.url))
        page.goto(viewer.url)
        page.get_by_text("counter").first.wait_for(timeout=60_000)
        for which, log in logs.items():
            for tab in ("transcript", "messages", "scoring", "metadata"):
                page.goto(f"{viewer.url}#/logs/{quote(log)}/samples/sample/{viewer.ids[which]}/1/{tab}")
                page.wait_for_timeout(2_000)  # room for anything the page would run or fetch
                shown[f"{which} {tab}"] = page.inner_text("body")
                found += [f"{which} {tab}: {hit}" for hit in page.evaluate(_AGENT_ATTRIBUTES, beacon_host)]
                clicks = [page.get_by_text(label).all()[:2] for label in ("-link-", "osc8")]  # the agent's links
                clicks.append(page.locator(f"a[href^='javascript:'], a[href*='{beacon_host}']").all())
                for element in (element for group in clicks for element in group):
                    with contextlib.suppress(PlaywrightError):  # text off screen or gone: nothing to follow
                        element.click(timeout=3_000, force=True, no_wait_after=True)
                page.wait_for_timeout(500)
                if page.evaluate("window.rebenchPwned"):
                    found.append(f"{which} {tab}: script ran ({page.evaluate('window.rebenchPwned')})")
                if not page.url.startswith(viewer.url):
                    found.append(f"{which} {tab}: a click left the viewer for {page.url}")
        browser.close()
    assert found == []
    assert beacon.asked == [], f"the browser fetched what the agent named: {beacon.asked}"
    assert [u for u in seen if not u.startswith(viewer.url)] == [], "the page asked another origin"
    assert "html-js-link-model-text" in shown["attempt transcript"], "the agent's markup is shown, as text"
    assert "md-link-gateway" in shown["gateway messages"]


_AGENT_ATTRIBUTES = """beacon => {
  const URL_ATTRIBUTES = ['href', 'xlink:href', 'src', 'srcset', 'srcdoc', 'data', 'action', 'formaction', 'poster',
                          'style', 'background'];
  const hits = [];
  for (const element of document.querySelectorAll('*')) {
    const tag = element.tagName.toLowerCase();
    if (['iframe', 'object', 'embed', 'base'].includes(tag)) hits.push('<' + tag + '>');
    for (const attribute of element.attributes) {
      const name = attribute.name.toLowerCase(), value = attribute.value;
      const script = name.startsWith('on') && value.includes('rebenchPwned');
      const address = URL_ATTRIBUTES.includes(name) && (value.includes(beacon) || /^\\s*javascript:/i.test(value));
      if (script || address || name === 'srcdoc') hits.push(tag + ' ' + name + '=' + value.slice(0, 80));
    }
  }
  return hits;
}"""


def test_viewer_forces_plain_text_and_an_origin_policy(viewer: Viewer) -> None:
    status, body = _get(viewer, "/api/app-config")
    assert status == 200 and b'"trust_content":false' in body.replace(b" ", b""), body
    page = http.client.HTTPConnection(urlsplit(viewer.url).hostname or "", urlsplit(viewer.url).port, timeout=30)
    page.request("GET", "/")
    response = page.getresponse()
    policy = response.getheader("Content-Security-Policy") or ""
    page.close()
    for directive in ("default-src 'none'", "img-src 'self' data:", "connect-src 'self'", "frame-src 'none'",
                      "form-action 'none'", "frame-ancestors 'none'"):
        assert directive in policy, policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0], policy


def test_only_the_exported_logs_are_listed_and_served(viewer: Viewer) -> None:
    folder = viewer.folder
    exported = sorted(p.name for p in folder.glob("*.eval"))
    status, listing = _get(viewer, "/api/logs")
    assert status == 200
    for name in ("passwd.eval", "store.json", "db.eval", "/etc/"):
        assert name.encode() not in listing, f"the listing names {name}"
    for log in exported:
        assert log.encode() in listing
        assert _get(viewer, f"/api/log-bytes/{quote(str(folder / log))}?start=0&end=3")[0] == 200
    planted = [folder / "passwd.eval", folder / "store.json", folder / "etc" / "passwd", folder / "inner" / "db.eval"]
    leaks = [f"{route} {path}" for path in planted for route in ("/api/log-bytes", "/api/log-download", "/api/logs")
             if _leaks(*_get(viewer, f"{route}/{quote(str(path))}?start=0&end=64"))]
    assert leaks == [], "a link in the view folder served an outside file"
    assert {p.name for p in folder.iterdir()} == set(exported), "only the logs are left in the view folder"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700, "no other user reads the transcripts"


def test_a_link_in_place_of_the_view_folder_is_not_followed(tmp_path: Path, beacon: Beacon) -> None:
    """The old code exported into the link's target and deleted every `*.eval` there it had not written."""
    db = tmp_path / "hostile.db"
    ids = hostile_html_database(db, beacon.url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.eval").write_text("the operator's own log")
    folder = _folder_of(db, tmp_path / "cache")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(elsewhere, target_is_directory=True)
    with _viewer(db, ids, tmp_path) as started:
        assert [p.name for p in elsewhere.iterdir()] == ["keep.eval"], "nothing written or removed through the link"
        assert started.folder.is_dir() and not started.folder.is_symlink()
        assert len(list(started.folder.glob("*.eval"))) == 2


def test_paths_outside_the_folder_are_refused(viewer: Viewer) -> None:
    folder = str(viewer.folder)
    up = "../" * (len(viewer.folder.parts) - 1)
    outside = [f"{folder}/{up}etc/passwd", f"{folder}/..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
               f"{folder}/%252e%252e%252f%252e%252e%252f{quote(str(viewer.db))}",
               f"{folder}/%2e%2e/%2e%2e/%2e%2e/{viewer.db.name}", "/etc/passwd", "%2fetc%2fpasswd", "file:///etc/passwd",
               f"{folder}\\..\\..\\..\\{viewer.db.name}", f"{folder}/..\\..\\..\\{viewer.db.name}",
               f"{folder}-sibling/data.json", str(viewer.db), f"{folder}/x.eval%00/../../../{viewer.db.name}"]
    requests = [f"{route}/{path}?start=0&end=64" for path in outside
                for route in ("/api/log-bytes", "/api/log-download", "/api/logs", "/api/log-info")]
    requests += [f"/api/log-bytes/{quote(path, safe='')}?start=0&end=64" for path in outside]
    requests += [f"/api/{route}?log_dir={quote(path)}" for route in ("logs", "log-files", "log-dir")
                 for path in ("/etc", "/", str(viewer.db.parent), f"{folder}/..")]
    requests += ["/api/eval-set?dir=../../../../etc", "/api/flow?dir=../../../../../etc",
                 "/api/log-headers?file=/etc/passwd", f"/api/pending-samples?log={quote(str(viewer.db))}",
                 "/../../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "/assets/..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd", "/index.html/../../../../etc/passwd"]
    leaks = [path for path in requests if _leaks(*_get(viewer, path))]
    assert leaks == []
    assert _get(viewer, "/api/logs", {"Host": "evil.example"})[0] == 400, "a rebound DNS name is refused"
    assert _get(viewer, "/api/logs", {"Origin": "http://evil.example"})[0] == 403, "another site's page is refused"


def _leaks(status: int, body: bytes) -> bool:
    return status == 200 or any(secret in body for secret in SECRETS)


def test_viewer_listens_on_loopback_only(viewer: Viewer) -> None:
    tree = [psutil.Process(viewer.process.pid), *psutil.Process(viewer.process.pid).children(recursive=True)]
    listening = {c.laddr.ip for p in tree for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}, listening


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "0", "::ffff:127.0.0.1"])
def test_a_non_loopback_host_needs_allow_remote(tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["view", "--db", str(tmp_path / "none.db"), "--host", host, "--port", str(_free_port())],
                            capsys)
    assert code == 2, err
    assert f"--host {host!r} is not a loopback address" in err and "--allow-remote" in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("route", ["environment", "dotenv"])
def test_an_authorization_token_does_not_open_the_whole_disk(tmp_path: Path, beacon: Beacon, route: str) -> None:
    """INSPECT_VIEW_AUTHORIZATION_TOKEN (an operator's shell, or a `.env` an agent left in the folder the
    operator starts `rebench view` from) turned Inspect's folder check off."""
    db = tmp_path / "hostile.db"
    ids = hostile_html_database(db, beacon.url)
    cwd = tmp_path / "solution"
    cwd.mkdir()
    env = {}
    if route == "dotenv":
        (cwd / ".env").write_text("INSPECT_VIEW_AUTHORIZATION_TOKEN=agent-knows-this\n")
    else:
        env["INSPECT_VIEW_AUTHORIZATION_TOKEN"] = "agent-knows-this"
    with _viewer(db, ids, tmp_path, env=env, cwd=cwd) as started:
        token = {"Authorization": "agent-knows-this"}
        for path in ("/etc/passwd", str(db)):
            status, body = _get(started, f"/api/log-bytes/{quote(path)}?start=0&end=64", token)
            assert not _leaks(status, body), f"{path} was served with the token"
        assert _get(started, "/api/logs")[0] == 200, "the viewer at the printed address works without a token"
