"""The managed model cache's layout (sha256/<digest>/, partial/<org>/<name>/<commit>/, manifests/, locks/),
the safety of every path a model names, placing a finished download under its digest, and eviction.

Last use: a digest's directory mtime. `place_digest` sets it, and `ModelCache.touch` sets it again each
time a workflow starts serving the digest (access times are unreliable: relatime and noatime mounts), so
`evict_plan` evicts the digest least recently placed or served first.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from berth.errors import UserInputError, shown
from berth.model_digest import ManifestEntry, digest_of, manifest_text

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_LOCK_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_READ_ONLY_FILE, _READ_ONLY_DIR, _WRITABLE_DIR = 0o444, 0o555, 0o755


class ModelPathError(UserInputError):
    """A path a model names is unsafe or outside where models may be; one line says which and why."""


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise ModelPathError(f"{shown(digest)} is not a SHA-256 digest (64 lowercase hex characters)")
    return digest


class ModelCache:
    """The managed cache under one root (StateLayout.models)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def digest_dir(self, digest: str) -> Path:
        return self.root / "sha256" / _check_digest(digest)

    def partial_dir(self, repo: str, commit: str, variant: str = "") -> Path:
        """Where a download of `repo` at `commit` accumulates, so a retried job resumes it; `variant` (hex)
        keeps apart downloads of other file selections of the same commit."""
        if variant and not re.fullmatch(r"[0-9a-f]{1,64}", variant):
            raise ModelPathError(f"{shown(variant)} is not a hex variant")
        if not _REPO.match(repo) or ".." in repo:
            raise ModelPathError(f"{shown(repo)} is not a repository name like org/name")
        if not _COMMIT.match(commit):
            raise ModelPathError(f"{shown(commit)} is not a commit (40 or 64 lowercase hex characters)")
        organization, name = repo.split("/")
        return self.root / "partial" / organization / name / (f"{commit}-{variant}" if variant else commit)

    def manifest_path(self, digest: str) -> Path:
        return self.root / "manifests" / f"{_check_digest(digest)}.txt"

    def lock_path(self, key: str) -> Path:
        if not _LOCK_KEY.match(key) or ".." in key:
            raise ModelPathError(f"{shown(key)} is not a lock key (letters, digits, '.', '_', '-')")
        return self.root / "locks" / f"{key}.lock"

    def size_of(self, digest: str) -> int:
        """Bytes of the digest's files on disk (0 when not cached)."""
        total = 0
        for directory, _dirs, files in os.walk(self.digest_dir(digest)):
            total += sum(os.lstat(os.path.join(directory, name)).st_size for name in files)
        return total

    def cached_digests(self) -> dict[str, tuple[int, float]]:
        """digest → (bytes, last use) for every materialized digest; other names under sha256/ (none are
        made there but by `place_digest`) are not digests and are not listed."""
        found: dict[str, tuple[int, float]] = {}
        base = self.root / "sha256"
        if not base.is_dir():
            return found
        for child in base.iterdir():
            if _DIGEST.match(child.name) and child.is_dir() and not child.is_symlink():
                found[child.name] = (self.size_of(child.name), child.stat().st_mtime)
        return found

    def touch(self, digest: str) -> None:
        """Record a use of the digest (a workflow starts serving it): eviction takes the least recent."""
        os.utime(self.digest_dir(digest))


def safe_relative(path_text: str) -> str:
    """A repository file's relative path, as a source lists it, refused unless it stays inside the
    directory it is written under: no absolute path, '..', empty or '.' part, backslash or control char."""
    if not path_text:
        raise ModelPathError("a model file's path is empty")
    bad = next((c for c in path_text if c == "\\" or unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ModelPathError(f"the model file path {shown(path_text)} contains {bad!r}, which is not allowed")
    if path_text.startswith("/"):
        raise ModelPathError(f"the model file path {shown(path_text)} is absolute")
    if any(part in ("", ".", "..") for part in path_text.split("/")):
        raise ModelPathError(f"the model file path {shown(path_text)} has an empty, '.' or '..' part")
    return path_text


def allowed_model_dirs(setting: str) -> list[Path]:
    """The directories of `model_dirs` (os.pathsep-separated); each must be absolute."""
    dirs = []
    for text in (part.strip() for part in setting.split(os.pathsep)):
        if not text:
            continue
        if not os.path.isabs(text):
            raise ModelPathError(f"model_dirs entry {shown(text)} is not an absolute path")
        dirs.append(Path(text))
    return dirs


def staged_path(text: str, allowed_dirs: list[Path]) -> Path:
    """A pre-staged model directory, canonical (symlinks resolved), and inside an allowed model dir after
    resolving: a '../' or a symlink that leads out is refused."""
    if not allowed_dirs:
        raise ModelPathError("no model dir is allowed on this cluster; an administrator lists them in "
                             "model_dirs (BERTH_MODEL_DIRS)")
    if not os.path.isabs(text):
        raise ModelPathError(f"'{shown(text)}' is not an absolute path")
    allowed = [Path(os.path.realpath(directory)) for directory in allowed_dirs]
    listed = ", ".join(str(directory) for directory in allowed_dirs)
    try:
        resolved = Path(text).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable, or a symlink loop
        raise ModelPathError(f"'{shown(text)}' does not exist or cannot be resolved") from None
    if not any(resolved.is_relative_to(directory) for directory in allowed):
        raise ModelPathError(f"'{shown(text)}' is outside the allowed model dirs ({listed}) once '..' and "
                             "symlinks are resolved; stage the model under one of them")
    if not resolved.is_dir():
        raise ModelPathError(f"'{shown(text)}' is not a directory")
    return resolved


def _make_read_only(directory: Path, include_top: bool) -> None:
    """Files 0o444, directories 0o555, so a stray write into the cache fails. The top only when asked:
    `place_digest` locks it after its rename, since Linux moves a directory to another parent only with
    write permission on it (to update its '..')."""
    for current, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, _READ_ONLY_FILE)
        for name in dirs:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, _READ_ONLY_DIR)
    if include_top:
        os.chmod(directory, _READ_ONLY_DIR)


def _remove_tree(directory: Path) -> None:
    """rmtree of a tree `_make_read_only` may have locked: directories writable again first."""
    if not directory.exists() and not directory.is_symlink():
        return
    if directory.is_symlink() or not directory.is_dir():
        directory.unlink()
        return
    os.chmod(directory, _WRITABLE_DIR)
    for current, dirs, _files in os.walk(directory):
        for name in dirs:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, _WRITABLE_DIR)
    shutil.rmtree(directory)


def write_manifest(cache: ModelCache, digest: str, entries: Iterable[ManifestEntry]) -> Path:
    """manifests/<digest>.txt, written whole or not at all (tmp + os.replace)."""
    target = cache.manifest_path(digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{digest[:12]}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(manifest_text(entries))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def place_digest(staging: Path, cache: ModelCache, digest: str, entries: list[ManifestEntry]) -> Path:
    """Move a finished download (`staging`, on the cache's file system) to sha256/<digest>/ in one rename,
    read-only, with its manifest. When the digest is already there (another job made the same bytes) the
    staging copy is dropped and the existing one kept. Returns the digest's directory."""
    if digest_of(entries) != _check_digest(digest):
        raise ValueError(f"the manifest given does not have digest {digest[:12]}…")
    target = cache.digest_dir(digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    _make_read_only(staging, include_top=False)
    try:
        os.rename(staging, target)  # an empty leftover target is replaced; a full one refuses
    except OSError:
        if not target.is_dir():
            raise
        _remove_tree(staging)  # the same bytes are there already
    _make_read_only(target, include_top=True)
    write_manifest(cache, digest, entries)
    os.utime(target)  # its last use is now (see the module docstring)
    return target


def remove_digest(cache: ModelCache, digest: str) -> int:
    """Drop a digest's bytes and manifest; returns the bytes freed (0 when it was not cached)."""
    freed = cache.size_of(digest)
    _remove_tree(cache.digest_dir(digest))
    cache.manifest_path(digest).unlink(missing_ok=True)
    return freed


def evict_plan(cached: dict[str, tuple[int, float]], referenced: set[str],
               budget: int) -> tuple[list[str], list[str]]:
    """(digests to evict, referenced digests kept although eviction reached them): least recently used
    first (mtime, see the module docstring), skipping the referenced, until the total is within `budget`.
    When only referenced digests are left the cache may stay over budget: a model in use is never evicted."""
    total = sum(size for size, _used in cached.values())
    evict: list[str] = []
    kept_referenced: list[str] = []
    for digest in sorted(cached, key=lambda name: (cached[name][1], name)):
        if total <= budget:
            break
        if digest in referenced:
            kept_referenced.append(digest)
            continue
        evict.append(digest)
        total -= cached[digest][0]
    return evict, kept_referenced
