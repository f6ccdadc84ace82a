"""weights: download a model snapshot from an HF endpoint into a volume, with progress and typed errors."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# huggingface_hub reads this switch once, when it is imported. Xet transfers go to Hugging Face's own
# storage hosts rather than to the endpoint we are given, which an offline mirror cannot serve.
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

from filelock import FileLock, Timeout  # noqa: E402
from huggingface_hub import HfApi, snapshot_download  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFoundError  # noqa: E402
from huggingface_hub.hf_api import RepoFile  # noqa: E402
from huggingface_hub.utils import filter_repo_objects  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from activities.errors import (  # noqa: E402
    GatedModelError,
    HubRequestError,
    HubUnavailableError,
    ModelNotFoundError,
    RevisionNotFoundError,
    VolumeFullError,
    WeightsError,
)

try:  # huggingface_hub 2.x talks through httpx2; 1.x through httpx
    from httpx2 import TransportError
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub major
    from httpx import TransportError  # type: ignore[assignment]

logger = logging.getLogger(__name__)

# Where huggingface_hub keeps per-file metadata and `.incomplete` partials inside a local_dir.
DOWNLOAD_CACHE = Path(".cache") / "huggingface" / "download"
TOKEN_HINT = "set HfTokenSecret=secret://user/NAME (a secret of type hf holding a token with access)"


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


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    etag: str  # what huggingface_hub puts in the `.incomplete` name: LFS sha256, else the git blob id


ProgressCallback = Callable[[DownloadProgress], None]


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
    api = HfApi(endpoint=request.endpoint, token=_token(request), library_name="berth")
    # Every blocking step (HTTP metadata calls, stat/rglob over the volume) runs in a worker thread.
    commit, files = await asyncio.to_thread(_resolve, api, request)
    before, bytes_done = await asyncio.to_thread(_prepare_volume, local_dir, files, request)
    total = sum(file.size for file in files)
    logger.info(
        "weights: %s@%s (commit %s): %d files, %d bytes into %s (%d already there)",
        request.repo_id,
        request.revision,
        commit,
        len(files),
        total,
        local_dir,
        bytes_done,
    )

    reporter = _ProgressReporter(request.repo_id, local_dir, files, started)
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

    after = await asyncio.to_thread(_stat_files, local_dir, files)
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


def _token(request: WeightsRequest) -> str | bool:
    # False, not None: None would make huggingface_hub fall back to HF_TOKEN or a token saved on the
    # worker, so a workflow without HfTokenSecret would silently borrow the operator's credentials.
    return request.token if request.token else False


def _resolve(api: HfApi, request: WeightsRequest) -> tuple[str, list[RemoteFile]]:
    """Resolve the revision to a commit and list the files to fetch with their sizes."""
    try:
        info = api.model_info(request.repo_id, revision=request.revision, files_metadata=True)
        if info.gated and not request.token:
            raise GatedModelError(
                f"{request.repo_id} is a gated model ({info.gated} approval): {TOKEN_HINT} and accept "
                f"the model's conditions on its Hugging Face page with that account."
            )
        if info.sha is None:
            where = f"{request.repo_id}@{request.revision}"
            raise HubRequestError(f"{request.endpoint} returned no commit for {where}")
        siblings = info.siblings or []
        if siblings and all(sibling.size is not None for sibling in siblings):
            listing = [
                RemoteFile(
                    sibling.rfilename,
                    int(sibling.size or 0),
                    sibling.lfs.sha256 if sibling.lfs else str(sibling.blob_id),
                )
                for sibling in siblings
            ]
        else:
            # olah's local mirrors list no sizes in model_info; the tree listing has them.
            listing = [
                RemoteFile(entry.path, entry.size, entry.lfs.sha256 if entry.lfs else entry.blob_id)
                for entry in api.list_repo_tree(request.repo_id, revision=info.sha, recursive=True)
                if isinstance(entry, RepoFile)
            ]
    except WeightsError:
        raise
    except Exception as exc:
        mapped = _map_error(exc, request, api=api)
        if mapped is None:
            raise
        raise mapped from exc
    wanted = set(
        filter_repo_objects(
            [file.path for file in listing],
            allow_patterns=_patterns(request.allow_patterns),
            ignore_patterns=_patterns(request.ignore_patterns),
        )
    )
    return info.sha, sorted((file for file in listing if file.path in wanted), key=lambda file: file.path)


def _patterns(patterns: tuple[str, ...] | None) -> list[str] | None:
    return list(patterns) if patterns is not None else None


def _snapshot(request: WeightsRequest, commit: str) -> str:
    # Passing the commit (not the branch) skips a second revision lookup and lets finished files be
    # recognised from their local metadata without any request.
    return snapshot_download(
        request.repo_id,
        revision=commit,
        local_dir=request.local_dir,
        endpoint=request.endpoint,
        token=_token(request),
        allow_patterns=_patterns(request.allow_patterns),
        ignore_patterns=_patterns(request.ignore_patterns),
        max_workers=request.max_workers,
        library_name="berth",
        tqdm_class=_SilentTqdm,
    )


def _map_error(exc: BaseException, request: WeightsRequest, api: HfApi | None = None) -> WeightsError | None:
    """Translate a huggingface_hub / OS failure into a typed, actionable WeightsError (None: unknown)."""
    where = f"{request.repo_id}@{request.revision} from {request.endpoint}"
    # Order matters: GatedRepoError is a RepositoryNotFoundError, and every HfHubHTTPError is an OSError.
    if isinstance(exc, GatedRepoError):
        if request.token:
            return GatedModelError(
                f"The token from HfTokenSecret has no access to gated model {request.repo_id}: accept the "
                f"model's conditions on its Hugging Face page with the token's account, or use another token."
            )
        return GatedModelError(f"{request.repo_id} is a gated model: {TOKEN_HINT}.")
    if isinstance(exc, HubRevisionNotFoundError):
        return _revision_not_found(request)
    if isinstance(exc, RepositoryNotFoundError):
        # olah answers an unknown revision of a known repository with "Repository not found"; tell the
        # two apart by asking for the default branch.
        if api is not None and _repository_exists(api, request.repo_id):
            return _revision_not_found(request)
        hint = "." if request.token else f"; if it is private or gated, {TOKEN_HINT}."
        return ModelNotFoundError(f"Model repository {request.repo_id} not found at {request.endpoint}{hint}")
    if isinstance(exc, DisabledRepoError):
        return HubRequestError(f"Model repository {request.repo_id} is disabled (by its owner or the Hub).")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return GatedModelError(
                f"Access to {where} refused ({status}): check the token in HfTokenSecret "
                f"(missing, expired, or without access to this model)."
            )
        if status == 429 or (status is not None and status >= 500):
            return HubUnavailableError(f"{where}: the endpoint answered {status}; retry later.")
        return HubRequestError(f"{where}: the endpoint answered {status}: {exc}")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubRequestError(f"HF_HUB_OFFLINE is set in the worker's environment: cannot download {where}.")
    if isinstance(exc, (TransportError, LocalEntryNotFoundError, ConnectionError)):
        return HubUnavailableError(f"Cannot reach {request.endpoint} to download {request.repo_id}: {exc}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return VolumeFullError(
            f"The weights volume {request.local_dir} is full (or over quota) while downloading "
            f"{request.repo_id}: free space or use a larger Volume. The file being written was discarded; "
            f"files already complete are kept for the next attempt."
        )
    return None


def _revision_not_found(request: WeightsRequest) -> RevisionNotFoundError:
    return RevisionNotFoundError(
        f"Model repository {request.repo_id} has no revision {request.revision!r} at {request.endpoint}: "
        f"use an existing branch, tag or commit (Model=hf://{request.repo_id}@REVISION)."
    )


def _repository_exists(api: HfApi, repo_id: str) -> bool:
    # olah knows only branch main of a local mirror and refuses a revision-less lookup; the Hub takes both.
    for revision in (None, "main"):
        try:
            api.model_info(repo_id, revision=revision)
            return True
        except (HfHubHTTPError, TransportError):
            continue
    return False


def _prepare_volume(
    local_dir: Path, files: Sequence[RemoteFile], request: WeightsRequest
) -> tuple[dict[str, tuple[int, int, int] | None], int]:
    """Create the volume directory, check its free space, and note what is already there."""
    local_dir.mkdir(parents=True, exist_ok=True)
    reclaimed = _remove_dead_partials(local_dir, files)
    if reclaimed:
        logger.info("weights: removed %d bytes of partial files left by an interrupted attempt", reclaimed)
    _check_free_space(local_dir, files, request)
    return _stat_files(local_dir, files), _bytes_on_disk(local_dir, files)[0]


def _check_free_space(local_dir: Path, files: Sequence[RemoteFile], request: WeightsRequest) -> None:
    """Fail before fetching anything when the volume cannot hold the missing bytes."""
    done = {file.path for file in files if _is_complete(local_dir, file)}
    partials = _partial_sizes(local_dir, files)
    needed = sum(file.size - partials.get(file.etag, 0) for file in files if file.path not in done)
    free = shutil.disk_usage(local_dir).free
    if needed > free:
        raise VolumeFullError(
            f"The weights volume {local_dir} has {free} bytes free but {request.repo_id}@{request.revision} "
            f"needs {needed} more: free space or use a larger Volume."
        )


def _is_complete(local_dir: Path, file: RemoteFile) -> bool:
    # huggingface_hub renames `.incomplete` to the final name only after the size check passed, so a
    # final file of the expected size is a finished one.
    try:
        return (local_dir / file.path).stat().st_size == file.size
    except OSError:
        return False


def _partials(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, list[Path]]:
    """`.incomplete` partials of this snapshot's files, keyed by etag.

    huggingface_hub 2.x names them `<hash of name>.<etag>.<attempt id>.incomplete` (older releases:
    `<hash of name>.<etag>.incomplete`), so the etag is always the second dot-separated part.
    """
    etags = {file.etag for file in files}
    found: dict[str, list[Path]] = {}
    download_dir = local_dir / DOWNLOAD_CACHE
    if not download_dir.is_dir():
        return found
    for partial in download_dir.rglob("*.incomplete"):
        parts = partial.name.split(".")
        if len(parts) >= 3 and parts[1] in etags:
            found.setdefault(parts[1], []).append(partial)
    return found


def _partial_sizes(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, int]:
    """Bytes of the largest partial per etag (the live one, when dead attempts left others behind)."""
    limits = {file.etag: file.size for file in files}
    sizes: dict[str, int] = {}
    for etag, partials in _partials(local_dir, files).items():
        for partial in partials:
            try:
                size = partial.stat().st_size
            except OSError:
                continue  # renamed away between listing and stat: it is complete now
            sizes[etag] = max(sizes.get(etag, 0), min(size, limits[etag]))
    return sizes


def _remove_dead_partials(local_dir: Path, files: Sequence[RemoteFile]) -> int:
    """Delete partials left by killed attempts; returns the bytes reclaimed.

    huggingface_hub 2.x writes each attempt to a fresh, uniquely named partial and never resumes one
    from an earlier process (it deletes its own on failure, but cannot when killed), so a SIGKILLed
    attempt leaves its partial on the volume for good.
    A partial is dead when nobody holds the download lock of the files with its etag.
    """
    reclaimed = 0
    by_etag: dict[str, list[RemoteFile]] = {}
    for file in files:
        by_etag.setdefault(file.etag, []).append(file)
    for etag, partials in _partials(local_dir, files).items():
        locks = [
            FileLock(local_dir / DOWNLOAD_CACHE / f"{file.path}.lock", mode=0o664) for file in by_etag[etag]
        ]
        try:
            for lock in locks:
                lock.acquire(timeout=0)
        except Timeout:
            continue  # another process is downloading this file into the same volume right now
        else:
            for partial in partials:
                try:
                    reclaimed += partial.stat().st_size
                    partial.unlink()
                except OSError:
                    continue
        finally:
            for lock in locks:
                if lock.is_locked:
                    lock.release()
    return reclaimed


def _bytes_on_disk(local_dir: Path, files: Sequence[RemoteFile]) -> tuple[int, int]:
    """(bytes, finished files) of this snapshot present in local_dir, partials included."""
    partials = _partial_sizes(local_dir, files)
    done_bytes, done_files = 0, 0
    for file in files:
        if _is_complete(local_dir, file):
            done_bytes += file.size
            done_files += 1
        else:
            done_bytes += partials.get(file.etag, 0)
    return done_bytes, done_files


def _stat_files(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, tuple[int, int, int] | None]:
    """Identity of each final file (inode, mtime, size) so that a rewrite shows even at equal size."""
    identities: dict[str, tuple[int, int, int] | None] = {}
    for file in files:
        try:
            stat = (local_dir / file.path).stat()
            identities[file.path] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            identities[file.path] = None
    return identities


class _ProgressReporter:
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
        done, files_done = _bytes_on_disk(self._local_dir, self._files)
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
