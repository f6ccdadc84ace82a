"""The weights volume: what of a snapshot is already on disk (finished files, partials), whether the rest
fits, and the partials killed attempts left behind."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from activities.errors import VolumeFullError
from activities.hub import RemoteFile

logger = logging.getLogger(__name__)

# Where huggingface_hub keeps per-file metadata and `.incomplete` partials inside a local_dir.
DOWNLOAD_CACHE = Path(".cache") / "huggingface" / "download"

# Identity of a final file (inode, mtime, size), None when absent: a rewrite shows even at equal size.
FileIdentity = tuple[int, int, int] | None


def prepare_volume(local_dir: Path, files: Sequence[RemoteFile], snapshot: str) -> tuple[dict[str, FileIdentity], int]:
    """Create the volume directory, check its free space for `snapshot` (`repo@revision`, for the
    message), and note what is already there: each file's identity and the bytes on disk."""
    local_dir.mkdir(parents=True, exist_ok=True)
    reclaimed = remove_dead_partials(local_dir, files)
    if reclaimed:
        logger.info("weights: removed %d bytes of partial files left by an interrupted attempt", reclaimed)
    check_free_space(local_dir, files, snapshot)
    return file_identities(local_dir, files), bytes_on_disk(local_dir, files)[0]


def check_free_space(local_dir: Path, files: Sequence[RemoteFile], snapshot: str) -> None:
    """Fail before fetching anything when the volume cannot hold the missing bytes."""
    done = {file.path for file in files if is_complete(local_dir, file)}
    partials = partial_sizes(local_dir, files)
    needed = sum(file.size - partials.get(file.etag, 0) for file in files if file.path not in done)
    free = shutil.disk_usage(local_dir).free
    if needed > free:
        raise VolumeFullError(
            f"The weights volume {local_dir} has {free} bytes free but {snapshot} "
            f"needs {needed} more: free space or use a larger Volume."
        )


def is_complete(local_dir: Path, file: RemoteFile) -> bool:
    # huggingface_hub renames `.incomplete` to the final name only after the size check passed, so a
    # final file of the expected size is a finished one.
    try:
        return (local_dir / file.path).stat().st_size == file.size
    except OSError:
        return False


def partials(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, list[Path]]:
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


def partial_sizes(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, int]:
    """Bytes of the largest partial per etag (the live one, when dead attempts left others behind)."""
    limits = {file.etag: file.size for file in files}
    sizes: dict[str, int] = {}
    for etag, found in partials(local_dir, files).items():
        for partial in found:
            try:
                size = partial.stat().st_size
            except OSError:
                continue  # renamed away between listing and stat: it is complete now
            sizes[etag] = max(sizes.get(etag, 0), min(size, limits[etag]))
    return sizes


def remove_dead_partials(local_dir: Path, files: Sequence[RemoteFile]) -> int:
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
    for etag, found in partials(local_dir, files).items():
        locks = [
            FileLock(local_dir / DOWNLOAD_CACHE / f"{file.path}.lock", mode=0o664) for file in by_etag[etag]
        ]
        try:
            for lock in locks:
                lock.acquire(timeout=0)
        except Timeout:
            continue  # another process is downloading this file into the same volume right now
        else:
            reclaimed += _unlink_all(found)
        finally:
            for lock in locks:
                if lock.is_locked:
                    lock.release()
    return reclaimed


def _unlink_all(paths: Sequence[Path]) -> int:
    """Delete each path that is still there; returns the bytes they held."""
    removed = 0
    for path in paths:
        try:
            removed += path.stat().st_size
            path.unlink()
        except OSError:
            continue
    return removed


def bytes_on_disk(local_dir: Path, files: Sequence[RemoteFile]) -> tuple[int, int]:
    """(bytes, finished files) of this snapshot present in local_dir, partials included."""
    sizes = partial_sizes(local_dir, files)
    done_bytes, done_files = 0, 0
    for file in files:
        if is_complete(local_dir, file):
            done_bytes += file.size
            done_files += 1
        else:
            done_bytes += sizes.get(file.etag, 0)
    return done_bytes, done_files


def file_identities(local_dir: Path, files: Sequence[RemoteFile]) -> dict[str, FileIdentity]:
    """Identity of each final file (inode, mtime, size) so that a rewrite shows even at equal size."""
    identities: dict[str, FileIdentity] = {}
    for file in files:
        try:
            stat = (local_dir / file.path).stat()
            identities[file.path] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            identities[file.path] = None
    return identities
