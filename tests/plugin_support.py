"""Installing a plugin distribution the way `pip install` leaves one, for entry-point tests."""

from __future__ import annotations

from pathlib import Path


def install_distribution(site: Path, distribution: str, module: str, source: str, group: str,
                         entries: dict[str, str]) -> None:
    """Write `module` (a .py file with `source`) and a dist-info folder declaring `entries`
    (name -> attribute of the module) in entry-point `group`, into `site` (a sys.path folder)."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{distribution}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {module}:{target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
