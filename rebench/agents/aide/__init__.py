"""The aide agent (rebench.agents.aide.agent): a tree search over whole solutions."""

BEST_NOTE = "aide: best node restored"
"""The `note` event the agent writes when it puts its best node back (data: node, metric, nodes)."""
