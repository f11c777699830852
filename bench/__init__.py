"""Benchmarks (not tests): `make bench` runs every figure and rewrites BENCHMARKS.md."""
