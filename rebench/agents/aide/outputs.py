"""Keeping what the best node's run produced (a checkpoint, a results file) so it can be put back.

A node's files are text the agent wrote and can write again, but its run command may leave
outputs (a trained model, where the submission is a checkpoint) that a later, worse node
overwrites. After each new best node, every file in the solution folder changed since the
attempt began is copied to a folder in the home (not scored, not snapshotted); putting the best
node back deletes what later runs created and copies those files back. Starting files that are
not text and were changed in place by a later run cannot be put back (there is no copy of the start).
"""

from __future__ import annotations

import json

from rebench.agents.base import AgentContext

_SAVE = """
import os, shutil
keep = {keep!r}
since = os.stat(os.path.join(keep, "start")).st_mtime_ns
tmp = os.path.join(keep, "best.tmp")
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
for root, dirs, files in os.walk("."):
    for name in files:
        path = os.path.join(root, name)
        if not os.path.islink(path) and os.stat(path).st_mtime_ns > since:
            dest = os.path.join(tmp, os.path.relpath(path, "."))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(path, dest)
shutil.rmtree(os.path.join(keep, "best"), ignore_errors=True)
os.rename(tmp, os.path.join(keep, "best"))
"""

_PUT_BACK = """
import json, os, shutil
keep, use = {keep!r}, {use!r}
since = os.stat(os.path.join(keep, "start")).st_mtime_ns
with open(os.path.join(keep, "start-files")) as handle:
    start = {{os.path.relpath(line.rstrip("\\n"), ".") for line in handle if line.strip()}}
best = os.path.join(keep, "best")
kept = set()
if use and os.path.isdir(best):
    for root, dirs, files in os.walk(best):
        kept.update(os.path.relpath(os.path.join(root, name), best) for name in files)
for root, dirs, files in os.walk("."):
    for name in files:
        path = os.path.relpath(os.path.join(root, name), ".")
        if path not in kept and path not in start and os.lstat(path).st_mtime_ns > since:
            os.remove(path)
for path in sorted(kept):
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copy2(os.path.join(best, path), path)
print(json.dumps(sorted(kept)))
"""


class KeptOutputs:
    def __init__(self, ctx: AgentContext) -> None:
        self.keep = ctx.paths.in_home(".aide")
        self.saved: int | None = None
        """The node whose outputs are kept."""
        self.in_place: int | None = None
        """The node whose outputs the solution folder holds now (None: unknown or the start)."""
        self.longest_s = 0.0

    async def mark_start(self, ctx: AgentContext) -> None:
        await ctx.bash(f"mkdir -p {self.keep} && find . -type f > {self.keep}/start-files && touch {self.keep}/start",
                       timeout=120)

    async def save(self, ctx: AgentContext, node: int) -> None:
        started = ctx.elapsed_s()
        result = await ctx.python(_SAVE.format(keep=self.keep), timeout=max(60.0, ctx.remaining_s()))
        self.longest_s = max(self.longest_s, ctx.elapsed_s() - started)
        self.saved = node if result.ok else None
        self.in_place = node

    async def put_back(self, ctx: AgentContext, node: int | None) -> list[str]:
        """Make the folder's run outputs `node`'s (None: the start's); returns the paths copied back."""
        if node is not None and node == self.in_place:
            return []
        started = ctx.elapsed_s()
        use = node is not None and node == self.saved
        result = await ctx.python(_PUT_BACK.format(keep=self.keep, use=use), timeout=max(60.0, ctx.remaining_s()))
        self.longest_s = max(self.longest_s, ctx.elapsed_s() - started)
        if not result.ok:
            self.in_place = None
            return []
        self.in_place = node if use else None
        lines = result.stdout.strip().splitlines()
        return list(json.loads(lines[-1])) if lines else []
