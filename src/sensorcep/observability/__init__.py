"""Watching the queries: progress capture, health rules, state-store tuning, plots, workspace runs."""
