"""Berth's benchmarks. They measure the hot path as the endpoint proxy runs it: compiled where `make compiled` built
it and the build matches the sources (berth/compiled.py), so it is installed before any benchmark imports it."""

from berth import compiled

compiled.install()
