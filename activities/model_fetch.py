"""model_fetch: download one resolved commit into a staging directory: resumable, verified, in parallel.

Each file streams into `<staging>/<path>.part` and is renamed to its name once its bytes match the
checksum the source published (LFS sha256, else the git blob SHA-1). A `.part` left by an interrupted
attempt is resumed with `Range: bytes=N-` (its prefix is hashed from disk, never fetched again); a server
that ignores the range (200, as olah's local mirrors do) restarts the file. A per-commit lock
(`<staging>.lock`) makes a second job for the same commit wait and then find the files complete.

Bytes that fail verification are deleted and ChecksumMismatchError raised, with no retry here: it is
retryable, so Temporal's next attempt (visible in the history) fetches that file from zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

from activities.errors import GatedModelError, HubRequestError, HubUnavailableError, VolumeFullError, WeightsError
from activities.hub import RemoteFile, Resolved, status_verdict
from berth.contracts.model_registry import ModelProgress

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[ModelProgress], None]
# Writes and hashes leave the event loop in pieces this big: a thread hop per 4 MiB costs nothing next to
# hashing them, and hashlib releases the GIL, so files hash in parallel (bench/model_fetch.py: 1.47x plain).
WRITE_CHUNK = 4 * 1024 * 1024
READ_CHUNK = 8 * 1024 * 1024
RATE_WINDOW_SECONDS = 5.0
LOCK_POLL_SECONDS = 0.2


class ChecksumMismatchError(WeightsError, ValueError):
    """A file's bytes do not match the checksum its source published; they were deleted."""

    non_retryable = False  # the next attempt fetches the file from zero
    error_type = "ChecksumMismatch"


@dataclass(frozen=True)
class FetchResult:
    """What the staging directory holds now, and what this call had to transfer for it."""

    files: dict[str, tuple[int, str]]  # path -> (size, sha256)
    bytes_transferred: int  # bytes received over HTTP by this call (resumed prefixes not included)
    verified: bool  # every file matched a checksum the source published
    unverified_files: list[str]  # files the source published no checksum for
    seconds: float


@dataclass
class _Counters:
    """Shared by the file tasks and the progress ticker; touched from the event loop thread only."""

    bytes_total: int
    files_total: int
    bytes_done: int = 0  # on disk and accounted for, resumed and already-complete files included
    bytes_transferred: int = 0
    files_done: int = 0
    samples: deque[tuple[float, int]] = field(default_factory=deque)

    def progress(self) -> ModelProgress:
        now = time.monotonic()
        self.samples.append((now, self.bytes_transferred))
        while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW_SECONDS:
            self.samples.popleft()
        first_at, first_bytes = self.samples[0]
        rate = (self.bytes_transferred - first_bytes) / (now - first_at) if now > first_at else 0.0
        left = self.bytes_total - self.bytes_done
        eta = 0.0 if left <= 0 else (left / rate if rate > 0 else None)
        return ModelProgress(bytes_done=self.bytes_done, bytes_total=self.bytes_total, rate_bps=max(rate, 0.0),
                             eta_s=eta, files_done=self.files_done, files_total=self.files_total)


class _Sink:
    """One file being written: its handle and the running checksums of every byte it holds."""

    def __init__(self, handle: BinaryIO, with_blob_id: bool, size: int) -> None:
        self.handle = handle
        self.with_blob_id = with_blob_id
        self.size = size
        self.reset()

    def reset(self) -> None:
        self.sha256 = hashlib.sha256()
        # git's blob id: SHA-1 over a "blob <size>\0" header, then the content.
        self.sha1 = hashlib.sha1(b"blob %d\0" % self.size) if self.with_blob_id else None
        self.length = 0

    def feed(self, data: bytes) -> None:
        self.sha256.update(data)
        if self.sha1 is not None:
            self.sha1.update(data)
        self.length += len(data)

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.feed(data)

    def restart(self) -> None:
        """Drop every byte held: the file starts again from zero."""
        self.handle.seek(0)
        self.handle.truncate(0)
        self.reset()

    def hash_existing(self) -> None:
        """Hash what the handle already holds, from its start (a resumed `.part`, a complete file)."""
        self.handle.seek(0)
        while chunk := self.handle.read(READ_CHUNK):
            self.feed(chunk)


def check_free_disk(staging_dir: Path, needed_bytes: int) -> None:
    """Refuse (VolumeFullError) when the filesystem holding `staging_dir` has less free than needed."""
    where = staging_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if free < needed_bytes:
        raise VolumeFullError(
            f"needs {needed_bytes / 1e9:.1f} GB free under {where}, has {free / 1e9:.1f} GB; "
            f"free space or evict the cache: berth model cache evict"
        )


@contextlib.asynccontextmanager
async def commit_lock(staging_dir: Path) -> AsyncIterator[None]:
    """Hold an exclusive flock on `<staging>.lock` for the block, polling so the event loop never blocks."""
    lock_path = staging_dir.with_name(staging_dir.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = await asyncio.to_thread(open, lock_path, "a+b")
    try:
        waited = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    logger.info("model fetch: waiting for another job fetching into %s", staging_dir)
                    waited = True
                await asyncio.sleep(LOCK_POLL_SECONDS)
        yield
    finally:
        handle.close()  # closing the descriptor releases the lock


async def fetch(
    resolved: Resolved,
    endpoint: str,
    repo: str,
    staging_dir: Path,
    token: str | None,
    progress_cb: ProgressCallback | None = None,
    max_workers: int = 8,
    *,
    progress_interval: float = 1.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> FetchResult:
    """Fetch every file of `resolved` from `{endpoint}/{repo}/resolve/{commit}/…` into `staging_dir`.

    Resumes `.part` files, skips (but hashes) complete ones, checks free disk first, and reports
    progress about every `progress_interval` seconds from the event loop's thread. Raises the
    WeightsError subclasses of activities.errors, or ChecksumMismatchError naming the file.
    """
    started = time.monotonic()
    async with commit_lock(staging_dir):
        await asyncio.to_thread(staging_dir.mkdir, parents=True, exist_ok=True)
        present = await asyncio.to_thread(_bytes_present, staging_dir, resolved.files)
        await asyncio.to_thread(check_free_disk, staging_dir, resolved.size_bytes - present)
        counters = _Counters(bytes_total=resolved.size_bytes, files_total=len(resolved.files))
        ticker = asyncio.ensure_future(_tick(counters, progress_cb, progress_interval))
        # The token goes in this header only (httpx drops it on a redirect to another host, e.g. a CDN).
        headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {token}"} if token else {})}
        base = f"{endpoint.rstrip('/')}/{repo}/resolve/{resolved.commit}/"
        limits = httpx.Limits(max_connections=max_workers, max_keepalive_connections=max_workers)
        timeout = httpx.Timeout(30.0, read=120.0, pool=None)
        try:
            async with httpx.AsyncClient(headers=headers, follow_redirects=True, limits=limits,
                                         timeout=timeout, transport=transport) as client:
                outcomes = await _fetch_all(client, base, staging_dir, resolved.files, counters, max_workers)
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if progress_cb is not None:
            progress_cb(counters.progress())
    unverified = sorted(path for path, (_, _, checked) in outcomes.items() if not checked)
    return FetchResult(
        files={path: (size, sha256) for path, (size, sha256, _) in outcomes.items()},
        bytes_transferred=counters.bytes_transferred,
        verified=not unverified,
        unverified_files=unverified,
        seconds=round(time.monotonic() - started, 3),
    )


async def _tick(counters: _Counters, progress_cb: ProgressCallback | None, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        if progress_cb is not None:
            progress_cb(counters.progress())  # on the loop's thread: Temporal heartbeats are sent from there


def _bytes_present(staging_dir: Path, files: list[RemoteFile]) -> int:
    """Bytes already on disk that count toward `files` (complete files and `.part` prefixes)."""
    present = 0
    for file in files:
        for candidate in (staging_dir / file.path, _part_path(staging_dir, file)):
            with contextlib.suppress(OSError):
                present += min(candidate.stat().st_size, file.size)
                break
    return present


def _part_path(staging_dir: Path, file: RemoteFile) -> Path:
    final = staging_dir / file.path
    return final.with_name(final.name + ".part")


async def _fetch_all(
    client: httpx.AsyncClient, base: str, staging_dir: Path, files: list[RemoteFile], counters: _Counters,
    max_workers: int,
) -> dict[str, tuple[int, str, bool]]:
    """Run one task per file under a semaphore; the first failure cancels the rest (their `.part` stays)."""
    semaphore = asyncio.Semaphore(max_workers)
    outcomes: dict[str, tuple[int, str, bool]] = {}

    async def one(file: RemoteFile) -> None:
        async with semaphore:
            outcomes[file.path] = await _fetch_file(client, base, staging_dir, file, counters)
            counters.files_done += 1

    try:
        async with asyncio.TaskGroup() as group:
            for file in files:
                group.create_task(one(file))
    except BaseExceptionGroup as failures:
        raise _first_error(failures) from None
    return outcomes


def _first_error(failures: BaseExceptionGroup[Any]) -> BaseException:
    """The error to raise for a failed group: a typed WeightsError when there is one."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [failures]
    while pending:
        current = pending.pop()
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        else:
            leaves.append(current)
    typed = [leaf for leaf in leaves if isinstance(leaf, WeightsError)]
    return typed[0] if typed else leaves[0]


async def _fetch_file(
    client: httpx.AsyncClient, base: str, staging_dir: Path, file: RemoteFile, counters: _Counters
) -> tuple[int, str, bool]:
    """Bring one file to its final name, verified: (size, sha256, whether a published checksum matched)."""
    final = staging_dir / file.path
    part = _part_path(staging_dir, file)
    await asyncio.to_thread(final.parent.mkdir, parents=True, exist_ok=True)
    complete = await asyncio.to_thread(_size_or_none, final) == file.size
    target = final if complete else part
    handle = await asyncio.to_thread(open, target, "r+b" if complete or target.exists() else "w+b")
    try:
        sink = _Sink(handle, with_blob_id=file.sha256 is None and file.blob_id is not None, size=file.size)
        if (await asyncio.to_thread(_size_or_none, target) or 0) > file.size:
            await asyncio.to_thread(sink.restart)  # longer than the file can be: start over
        await asyncio.to_thread(sink.hash_existing)
        counters.bytes_done += sink.length
        if sink.length < file.size:
            await _download(client, base + quote(file.path, safe="/"), file, sink, counters)
        checked = _verify(file, sink)
        await asyncio.to_thread(handle.flush)
    except ChecksumMismatchError:
        handle.close()
        await asyncio.to_thread(target.unlink, missing_ok=True)
        raise
    finally:
        handle.close()
    if not complete:
        # No fsync: a crash that loses these pages leaves a file the next attempt's hash refuses.
        await asyncio.to_thread(os.replace, part, final)
    return file.size, sink.sha256.hexdigest(), checked


def _size_or_none(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _verify(file: RemoteFile, sink: _Sink) -> bool:
    """True when a published checksum matched, False when none was published; raises on a mismatch."""
    if sink.length < file.size:  # the body ended early: keep the `.part`, the next attempt resumes it
        raise HubUnavailableError(f"{file.path}: the endpoint sent {sink.length} of {file.size} bytes")
    if sink.length > file.size:
        raise ChecksumMismatchError(f"{file.path}: {sink.length} bytes received, the listing says {file.size}")
    if file.sha256 is not None:
        if sink.sha256.hexdigest() != file.sha256:
            raise ChecksumMismatchError(f"{file.path}: SHA-256 {sink.sha256.hexdigest()} != published "
                                        f"{file.sha256}; its bytes were deleted")
        return True
    if file.blob_id is not None and sink.sha1 is not None:
        if sink.sha1.hexdigest() != file.blob_id:
            raise ChecksumMismatchError(f"{file.path}: git blob id {sink.sha1.hexdigest()} != published "
                                        f"{file.blob_id}; its bytes were deleted")
        return True
    return False


async def _download(client: httpx.AsyncClient, url: str, file: RemoteFile, sink: _Sink, counters: _Counters) -> None:
    """Append the missing bytes of `file` to `sink`, from where it stops (a 200 restarts it from zero)."""
    for _ in range(2):  # a second round only after a 416 refused the range
        offset = sink.length
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            async with client.stream("GET", url, headers=headers) as response:
                if response.status_code == 416:
                    await _restart(sink, counters)
                    continue
                _raise_for_status(response, file)
                if offset and response.status_code != 206:
                    # The server ignored the range: the prefix we hold is dropped, the body restarts.
                    await _restart(sink, counters)
                elif offset and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
                    raise HubRequestError(f"{file.path}: the endpoint answered a range starting elsewhere "
                                          f"({response.headers.get('content-range')!r})")
                await _stream_body(response, sink, counters, file)
                return
        except httpx.TransportError as exc:
            raise HubUnavailableError(f"{file.path}: transfer from the endpoint failed "
                                      f"({type(exc).__name__}); the partial file is kept for the next attempt") from exc
        except OSError as exc:
            if VolumeFullError.matches(exc):
                raise VolumeFullError(f"{file.path}: no space left while writing it; free space or evict the "
                                      f"cache: berth model cache evict") from exc
            raise
    raise HubRequestError(f"{file.path}: the endpoint refused the range twice (416)")


async def _restart(sink: _Sink, counters: _Counters) -> None:
    counters.bytes_done -= sink.length
    await asyncio.to_thread(sink.restart)


def _raise_for_status(response: httpx.Response, file: RemoteFile) -> None:
    status = response.status_code
    if status < 400:
        return
    where = f"{file.path} ({status} from the endpoint)"
    verdict = status_verdict(status)  # the same verdict as activities.hub gives huggingface_hub's failures
    if verdict is GatedModelError:
        raise verdict(f"Access to {where} refused: check the token in HfTokenSecret")
    raise verdict(f"{where}: retry later" if verdict is HubUnavailableError else where)


async def _stream_body(response: httpx.Response, sink: _Sink, counters: _Counters, file: RemoteFile) -> None:
    """Copy the body into the sink in WRITE_CHUNK pieces, one write in flight while the next one fills."""
    buffer = bytearray()
    pending: asyncio.Future[None] | None = None
    try:
        async for chunk in response.aiter_raw():
            buffer += chunk
            counters.bytes_transferred += len(chunk)
            counters.bytes_done += len(chunk)
            if len(buffer) >= WRITE_CHUNK:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(asyncio.to_thread(sink.write, bytes(buffer)))
                buffer.clear()
            if sink.length + len(buffer) > file.size + WRITE_CHUNK:
                break  # more than the listing's size: _verify refuses it
        if pending is not None:
            await pending
            pending = None
        if buffer:
            await asyncio.to_thread(sink.write, bytes(buffer))
    finally:
        if pending is not None:  # cancelled mid-write: let the thread finish before the handle closes
            await asyncio.wait({pending})
