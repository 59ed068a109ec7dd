"""Benchmarks against the alternatives, side by side in one run (`make bench`). Never tests."""
