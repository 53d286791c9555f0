"""Reports: score@k by total time budget, comparison with human experts, imported METR data."""
