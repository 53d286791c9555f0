"""Which rebench produced a result: its version, for attempt rows, `--json` documents and exports.

The installed distribution's version when there is one (what `pip show rebench` says), else the
package's own `__version__` (a checkout run without installing)."""

from __future__ import annotations

from functools import cache


@cache
def rebench_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rebench")
    except PackageNotFoundError:
        from rebench import __version__

        return __version__
