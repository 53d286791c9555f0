"""Attempts written in other tools' formats: Inspect AI eval logs (rebench.export.inspect_log)."""
