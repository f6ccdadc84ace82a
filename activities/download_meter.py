"""DownloadMeter: the weight bytes one node agent has downloaded and its current rate, fed by the download
activities' progress callbacks and read by the agent's /metrics (node/node_metrics.py) at each scrape."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class DownloadTally:
    """One download's share: what it has on disk so far and its latest windowed rate."""

    meter: DownloadMeter
    key: int
    seen: int | None = None  # bytes on disk at the previous sample (None: no sample yet)

    def progress(self, bytes_done: int, bytes_per_second: float) -> None:
        """Note a progress sample. The first only sets the baseline: bytes already on the volume (a resumed
        download, a cache hit) were not downloaded now; a count that falls (a partial file restarted) adds
        nothing."""
        if self.seen is not None and bytes_done > self.seen:
            self.meter.add(bytes_done - self.seen)
        self.seen = max(bytes_done, self.seen or 0)
        self.meter.set_rate(self.key, bytes_per_second)


@dataclass
class DownloadMeter:
    """Thread-safe: activities write on the agent's event loop, the metrics server reads in its own thread."""

    total_bytes: int = 0
    _rates: dict[int, float] = field(default_factory=dict)
    _keys: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, count: int) -> None:
        with self._lock:
            self.total_bytes += count

    def set_rate(self, key: int, bytes_per_second: float) -> None:
        with self._lock:
            if key in self._rates:
                self._rates[key] = max(bytes_per_second, 0.0)

    @property
    def bytes_per_second(self) -> float:
        """The sum of the running downloads' rates: 0 once none runs."""
        with self._lock:
            return sum(self._rates.values())

    @contextmanager
    def download(self) -> Iterator[DownloadTally]:
        """One download for the block's length: its rate counts until the block ends, however it ends."""
        with self._lock:
            key = next(self._keys)
            self._rates[key] = 0.0
        try:
            yield DownloadTally(self, key)
        finally:
            with self._lock:
                self._rates.pop(key, None)
