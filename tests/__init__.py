"""Berth's suite. The hot path runs here as the endpoint proxy runs it: compiled where `make compiled` built it
and the build matches the sources (berth/compiled.py), so it is installed before any test module imports it."""

from berth import compiled

compiled.install()
