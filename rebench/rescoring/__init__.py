"""`rebench rescore`: score saved attempts again with the environment's current scorer and anchors.

plan.py picks the attempts and what of each is re-scored (or why it is skipped), run.py
scores them in fresh sandboxes and writes rows of their own (rebench.store.rescores);
rebench.report.rescored shows them beside the original scores (`attempts show`, `report --rescored RUN`)."""
