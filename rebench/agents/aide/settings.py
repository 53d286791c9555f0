"""The aide agent's knobs, read from `--agent-arg key=value` (scoped as `aide.KEY=VALUE` when a
campaign runs several agents).

The search policy's defaults are AIDE's own (5 drafts first, then debug a buggy leaf with
probability 1/2 up to 3 debug steps deep, otherwise improve the best node greedily); the
model's knobs are the ones every rebench LLM agent shares (rebench.agents.llm).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rebench.agents.llm import ModelSettings


class AideSettings(ModelSettings):
    num_drafts: int = Field(5, ge=0)
    """Drafts written from the task alone before any debugging or improving."""
    debug_prob: float = Field(0.5, ge=0.0, le=1.0)
    """Chance of debugging a buggy leaf (when there is one) instead of improving."""
    max_debug_depth: int = Field(3, ge=0)
    """A chain of this many debug steps is abandoned."""
    explore_prob: float = Field(0.0, ge=0.0, le=1.0)
    """Chance of improving a random working node instead of the best one (0: greedy, as AIDE)."""
    max_steps: int | None = Field(None, ge=1)
    """Nodes to build before stopping; None: until the budget (or a token or cost limit) ends."""
    rank_by: Literal["auto", "score", "review"] = "auto"
    """What ranks nodes: the environment's score (where it is shown and the best score counts) or
    the agent's own validation metric read from the run's output (`auto` picks)."""
    score_each_node: bool = True
    """Call the environment's score tool on every node (AIDE in RE-Bench scored 36.8 times an hour)."""
    exec_timeout_s: float = Field(600.0, gt=0)
    """The most one node's run command may take; it never outlives the remaining budget."""
    keep_outputs: bool = True
    """Keep a copy of what the best node's run produced (checkpoints, outputs) and put it back with it."""
    main_file: str | None = None
    """Where an unnamed code block goes; None: the only .py file of the starting solution, else solution.py."""
    max_shown_chars: int = Field(24_000, ge=1_000)
    """Starting files, code and output shown to the model are cut to this many characters each."""
    output_tail_chars: int = Field(4_000, ge=200)
    """How much of a run's output the node's event keeps."""
