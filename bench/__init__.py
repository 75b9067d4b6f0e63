"""Benchmarks: scripts run by hand (`python -m bench.NAME`), not timed tests."""
