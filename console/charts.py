"""Chart specs for console/static/charts.js: a page builds a LineChart (a time series) or a BarChart (stacked bars
per category) from what the API answered, and the template hands `spec()` to the `chart` macro
(templates/macros/chart.html), which puts it in the figure's `data-chart` attribute for the script to draw.

The specs are plain figures, so a page's table can show the same numbers; the script knows no API, so the events
and usage pages reuse it as they are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

MAX_SERIES = 6
# A series' colour, a class in console.css: the meaning, not the hue, so every page says "bad" alike.
Tone = Literal["accent", "bad", "ok", "warn", "muted", "violet"]


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]  # None: no figure there (a line's gap; a bar's nothing)
    tone: Tone | None = None  # None: the next tone in Tone's order


def _series(series: Sequence[Series]) -> list[dict[str, Any]]:
    return [{"name": s.name, "values": list(s.values), **({"tone": s.tone} if s.tone else {})} for s in series]


def _checked(series: Sequence[Series], length: int, what: str) -> None:
    if not 1 <= len(series) <= MAX_SERIES:
        raise ValueError(f"a chart has 1 to {MAX_SERIES} series, not {len(series)}")
    for one in series:
        if len(one.values) != length:
            raise ValueError(f"series {one.name!r} has {len(one.values)} values for {length} {what}")


@dataclass(frozen=True)
class LineChart:
    """Series over time: `x` holds each point's Unix time (drawn as HH:MM UTC)."""

    title: str
    unit: str
    x: Sequence[float]
    series: Sequence[Series]

    def __post_init__(self) -> None:
        _checked(self.series, len(self.x), "times")

    def spec(self) -> dict[str, Any]:
        return {"kind": "line", "title": self.title, "unit": self.unit, "x": list(self.x),
                "series": _series(self.series)}


@dataclass(frozen=True)
class BarChart:
    """One bar per category, its series stacked in order from the axis up."""

    title: str
    unit: str
    categories: Sequence[str]
    series: Sequence[Series]

    def __post_init__(self) -> None:
        _checked(self.series, len(self.categories), "categories")

    def spec(self) -> dict[str, Any]:
        return {"kind": "bar", "title": self.title, "unit": self.unit, "categories": list(self.categories),
                "series": _series(self.series)}
