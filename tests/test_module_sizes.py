"""Rooms stay small (issue 29): no module under rebench/ is over 400 lines, so a module keeps one
job. The exec server is the one exception: it is sent whole into each container and run there."""

from __future__ import annotations

from .conftest import REPO

LIMIT = 400
SENT_WHOLE = {"rebench/sandbox/exec_server.py"}


def test_no_module_under_rebench_is_over_400_lines() -> None:
    sizes = {str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines())
             for path in (REPO / "rebench").rglob("*.py")}
    assert len(sizes) > 100, "the package was not found"
    over = {name: lines for name, lines in sizes.items() if lines > LIMIT and name not in SENT_WHOLE}
    assert over == {}, f"split these by job (each at most {LIMIT} lines): {over}"
