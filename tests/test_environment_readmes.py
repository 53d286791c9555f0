"""Every environment's README ends with a table of where it differs from METR's task (issue 25), or,
for an environment taken from a paper rather than from RE-Bench, from the paper (issue 30)."""

from __future__ import annotations

import re
import tomllib

import pytest

from .conftest import REPO

SECTION = "## Differences from METR's task"
PAPER_SECTION = "## Differences from the paper"
RE_BENCH = {"fix_embedding", "nanogpt_chat_rl", "optimize_llm_foundry", "restricted_mlm",
            "rust_codecontests_inference", "small_scaling_law", "triton_cumsum"}
ENVIRONMENTS = sorted(path.name for path in (REPO / "environments").iterdir()
                      if path.is_dir() and (path / "environment.toml").is_file() and path.name != "_common")


def test_the_seven_environments_are_found() -> None:
    assert set(ENVIRONMENTS) >= RE_BENCH, ENVIRONMENTS


def _section(name: str) -> str:
    """The heading this environment's table has: METR's task where it ports one, else the paper."""
    meta = tomllib.loads((REPO / "environments" / name / "environment.toml").read_text(encoding="utf-8"))
    return SECTION if meta.get("metr_task_family") else PAPER_SECTION


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_readme_has_a_table_of_differences_from_metr(name: str) -> None:
    text = (REPO / "environments" / name / "README.md").read_text(encoding="utf-8")
    heading = _section(name)
    assert text.count(heading) == 1, f"{name}: no (or more than one) '{heading}' section"
    section = text.split(heading, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    assert len(lines) >= 3, f"{name}: the section holds no table with a row"
    assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[1]), f"{name}: the table has no header separator"
    columns = lines[0].count("|")
    rows = [line for line in lines[2:] if line.count("|") == columns and any(cell.strip() for cell in line.split("|"))]
    assert rows, f"{name}: the table has no row"


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_the_table_says_how_the_network_differs(name: str) -> None:
    """RE-Bench gave every task internet access; rebench gives none unless `--network full` (issue 25)."""
    section = (REPO / "environments" / name / "README.md").read_text(encoding="utf-8").split(_section(name), 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| Network:")]
    assert len(rows) == 1, f"{name}: no (or more than one) '| Network:' row in the table"
    assert "full internet" in rows[0] and "`rebench run --network full`" in rows[0], rows[0]
