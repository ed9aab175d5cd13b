"""Metrics, baselines, benchmarks and the evaluation suite. May use everything below it."""
