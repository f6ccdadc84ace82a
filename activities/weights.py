"""weights: download a model snapshot from an HF endpoint into a volume, with progress and typed errors.

The fetch lives here; asking the endpoint for the commit and its files, and translating its failures, in
`hub.py` (shared with the model registry's fetch); what is already on the volume in `weights_volume.py`, the
progress events in `weights_progress.py`."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from activities.errors import VolumeFullError, WeightsError
from activities.hub import HubSource, map_hub_error, resolve, token_argument
from activities.weights_progress import ProgressCallback, ProgressReporter
from activities.weights_volume import file_identities, prepare_volume

logger = logging.getLogger(__name__)

# How weights.py's message for a gated model asked for without a token has always ended.
ACCEPT_CONDITIONS = " and accept the model's conditions on its Hugging Face page with that account"


@dataclass(frozen=True)
class WeightsRequest:
    """What to download, from where, into which volume directory."""

    repo_id: str
    local_dir: str
    endpoint: str  # HF_ENDPOINT, passed explicitly: the worker's environment is not consulted
    revision: str = "main"
    allow_patterns: tuple[str, ...] | None = None
    ignore_patterns: tuple[str, ...] | None = None
    token: str | None = field(default=None, repr=False)  # already resolved from HfTokenSecret
    max_workers: int = 8
    progress_interval_seconds: float = 1.0

    @property
    def source(self) -> HubSource:
        """The revision asked of the endpoint, as activities.hub's error mapping names it."""
        return HubSource(self.endpoint, self.repo_id, self.revision, self.token)


@dataclass(frozen=True)
class WeightsResult:
    """Where the snapshot is, which commit it is, and what this attempt had to fetch."""

    repo_id: str
    revision: str
    commit: str
    local_dir: str
    files: int
    bytes_total: int
    bytes_downloaded: int  # size of the files this attempt wrote (interrupted files restart from zero)
    cache_hit: bool  # every file was already complete in the volume: nothing was fetched
    seconds: float


class _SilentTqdm(tqdm):  # type: ignore[type-arg]
    """huggingface_hub's own bars would only clutter a worker's stderr: progress is reported by us."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


async def download_weights(
    request: WeightsRequest, progress: ProgressCallback | None = None
) -> WeightsResult:
    """Download `request.repo_id` at `request.revision` into `request.local_dir`.

    A complete earlier download of the same commit is reused without fetching anything (cache_hit).
    After an interrupted attempt the finished files are kept and only the missing ones are fetched;
    a file that was partly written restarts from zero (huggingface_hub 2.x never resumes a partial left
    by another process), and the dead partial is deleted first. Raises a `WeightsError` subclass.
    """
    started = time.monotonic()
    local_dir = Path(request.local_dir)
    # Every blocking step (HTTP metadata calls, stat/rglob over the volume) runs in a worker thread.
    resolved = await asyncio.to_thread(
        resolve, request.endpoint, request.repo_id, request.revision, request.token, request.allow_patterns,
        request.ignore_patterns, gated_advice=ACCEPT_CONDITIONS,
    )
    commit, files = resolved.commit, resolved.files
    snapshot = f"{request.repo_id}@{request.revision}"
    before, bytes_done = await asyncio.to_thread(prepare_volume, local_dir, files, snapshot)
    total = sum(file.size for file in files)
    logger.info(
        "weights: %s (commit %s): %d files, %d bytes into %s (%d already there)",
        snapshot,
        commit,
        len(files),
        total,
        local_dir,
        bytes_done,
    )
    await _fetch(request, commit, ProgressReporter(request.repo_id, local_dir, files, started), progress)
    after = await asyncio.to_thread(file_identities, local_dir, files)
    written = [file for file in files if after[file.path] != before[file.path]]
    return WeightsResult(
        repo_id=request.repo_id,
        revision=request.revision,
        commit=commit,
        local_dir=str(local_dir),
        files=len(files),
        bytes_total=total,
        bytes_downloaded=sum(file.size for file in written),
        cache_hit=not written,
        seconds=round(time.monotonic() - started, 3),
    )


async def _fetch(
    request: WeightsRequest, commit: str, reporter: ProgressReporter, progress: ProgressCallback | None
) -> None:
    """Run the snapshot download in a worker thread, sampling progress every interval until it ends."""
    download = asyncio.ensure_future(asyncio.to_thread(_snapshot, request, commit))
    try:
        while True:
            finished, _ = await asyncio.wait({download}, timeout=request.progress_interval_seconds)
            event = await asyncio.to_thread(reporter.sample)
            if progress is not None:
                progress(event)  # on the event loop's thread: Temporal heartbeats must be sent from there
            if finished:
                break
        download.result()
    except WeightsError:
        raise
    except Exception as exc:
        mapped = _map_error(exc, request)
        if mapped is None:
            raise
        raise mapped from exc


def _patterns(patterns: tuple[str, ...] | None) -> list[str] | None:
    return list(patterns) if patterns is not None else None


def _snapshot(request: WeightsRequest, commit: str) -> str:
    # Imported here, never above activities.hub, which sets huggingface_hub's switches before its import.
    from huggingface_hub import snapshot_download

    # Passing the commit (not the branch) skips a second revision lookup and lets finished files be
    # recognised from their local metadata without any request.
    return snapshot_download(
        request.repo_id,
        revision=commit,
        local_dir=request.local_dir,
        endpoint=request.endpoint,
        token=token_argument(request.token),
        allow_patterns=_patterns(request.allow_patterns),
        ignore_patterns=_patterns(request.ignore_patterns),
        max_workers=request.max_workers,
        library_name="berth",
        tqdm_class=_SilentTqdm,
    )


def _map_error(exc: BaseException, request: WeightsRequest) -> WeightsError | None:
    """Translate a huggingface_hub / OS failure into a typed, actionable WeightsError (None: unknown):
    activities.hub's mapping, and the volume filling up."""
    mapped = map_hub_error(exc, request.source)
    if mapped is None and VolumeFullError.matches(exc):
        return VolumeFullError(
            f"The weights volume {request.local_dir} is full (or over quota) while downloading "
            f"{request.repo_id}: free space or use a larger Volume. The file being written was discarded; "
            f"files already complete are kept for the next attempt."
        )
    return mapped
