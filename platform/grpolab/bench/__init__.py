"""Benchmarks: the platform's own overhead per step, command-line answer times, worker scaling."""
