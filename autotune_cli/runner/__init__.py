"""Benchmarking: worker processes that build, verify and time candidates."""
