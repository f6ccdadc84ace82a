"""Download progress: samples of the bytes on the volume, turned into events with a windowed rate and ETA."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from activities.hub import RemoteFile
from activities.weights_volume import bytes_on_disk


@dataclass(frozen=True)
class DownloadProgress:
    """One progress sample: bytes on disk for this snapshot (finished files plus partials)."""

    repo_id: str
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    bytes_per_second: float
    eta_seconds: float | None  # None until a rate is known
    elapsed_seconds: float

    @property
    def fraction(self) -> float:
        return 1.0 if self.bytes_total == 0 else self.bytes_done / self.bytes_total


ProgressCallback = Callable[[DownloadProgress], None]


class ProgressReporter:
    """Samples the volume and turns bytes on disk into progress events with a windowed rate and ETA."""

    WINDOW_SECONDS = 10.0

    def __init__(
        self,
        repo_id: str,
        local_dir: Path,
        files: Sequence[RemoteFile],
        started: float,
    ) -> None:
        self._repo_id = repo_id
        self._local_dir = local_dir
        self._files = files
        self._total = sum(file.size for file in files)
        self._started = started
        self._samples: deque[tuple[float, int]] = deque()

    def sample(self) -> DownloadProgress:
        now = time.monotonic()
        done, files_done = bytes_on_disk(self._local_dir, self._files)
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.WINDOW_SECONDS:
            self._samples.popleft()
        first_time, first_done = self._samples[0]
        rate = max(done - first_done, 0) / (now - first_time) if now > first_time else 0.0
        remaining = max(self._total - done, 0)
        eta = 0.0 if remaining == 0 else (remaining / rate if rate > 0 else None)
        return DownloadProgress(
            repo_id=self._repo_id,
            bytes_done=done,
            bytes_total=self._total,
            files_done=files_done,
            files_total=len(self._files),
            bytes_per_second=round(rate, 1),
            eta_seconds=None if eta is None else round(eta, 1),
            elapsed_seconds=round(now - self._started, 3),
        )
