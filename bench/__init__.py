"""Benchmarks and experiments: run by hand (``python -m bench.<name>``), not by the test suite."""
