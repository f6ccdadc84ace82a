"""Quantities as people read them, shared by the CLI's tables and the console's pages."""

from __future__ import annotations


def binary_size(value: float) -> str:
    """Bytes in binary units, to one decimal above bytes: `512 B`, `1.5 KiB`, `13.8 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
