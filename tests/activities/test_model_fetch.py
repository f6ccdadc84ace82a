"""Tests for activities.model_fetch and activities.hub's listing against olah: real olah on loopback, real HTTP.

olah's local mirrors ignore `Range` (every GET answers 200 with the whole file), so the resume tests put
a tiny range-honouring reverse proxy in front of it; the proxy also counts the file bytes it serves.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import namedtuple
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from activities import model_fetch
from activities.errors import HubUnavailableError, ModelNotFoundError, RevisionNotFoundError, VolumeFullError
from activities.hub import RemoteFile, Resolved, resolve
from activities.model_fetch import ChecksumMismatchError, check_free_disk, fetch
from berth.contracts.model_registry import ModelProgress
from berth.hf_mirror import MirrorConfig, publish_repo, run_mirror
from tests.hf_range_proxy import RangeProxy

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = "acme/tiny-fetch"
BIG = "acme/big-fetch"
LFS = "acme/lfs-fetch"
MB = 1024 * 1024
SECRET = "hf_SECRETtoken0123456789"


@dataclass(frozen=True)
class Mirror:
    endpoint: str  # olah itself: ignores Range
    ranged: str  # the counting, range-honouring proxy in front of it
    proxy: RangeProxy
    files: dict[str, dict[str, bytes]]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mirror(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mirror]:
    root = tmp_path_factory.mktemp("hf-fetch")
    files = {
        TINY: {
            "config.json": b'{"model_type": "llama"}\n',
            "model.safetensors": os.urandom(3 * MB + 17),
            "sub/notes.txt": b"nested path\n",
            "empty.txt": b"",
        },
        BIG: {"config.json": b"{}\n", "model.safetensors": os.urandom(96 * MB)},
    }
    for repo_id, content in files.items():
        await asyncio.to_thread(publish_repo, root / "mirrors", repo_id, content)
    files[LFS] = {"config.json": b"{}\n", "weights.safetensors": os.urandom(2 * MB + 5)}
    await asyncio.to_thread(publish_lfs_repo, root / "mirrors", LFS, files[LFS], "weights.safetensors")
    config = MirrorConfig(mirrors_dir=root / "mirrors", state_dir=root / "olah")
    async with run_mirror(config) as endpoint:
        proxy = RangeProxy(endpoint)
        proxy.thread.start()
        try:
            yield Mirror(endpoint=endpoint, ranged=proxy.url, proxy=proxy, files=files)
        finally:
            proxy.server.shutdown()
            proxy.server.server_close()


def publish_lfs_repo(mirrors_dir: Path, repo_id: str, files: dict[str, bytes], lfs_name: str) -> None:
    """Publish `files` with `lfs_name` as a git-lfs pointer and its object where olah looks for it."""
    content = files[lfs_name]
    oid = sha256(content)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n"
    publish_repo(mirrors_dir, repo_id, {**files, lfs_name: pointer.encode()})
    obj = mirrors_dir / "models" / repo_id / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    obj.parent.mkdir(parents=True)
    obj.write_bytes(content)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def resolved(mirror: Mirror, repo: str) -> Resolved:
    return await asyncio.to_thread(resolve, mirror.endpoint, repo, "main", None)


def assert_staged(staging: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        assert sha256((staging / name).read_bytes()) == sha256(content), name
    assert not list(staging.rglob("*.part"))


async def test_resolve_lists_files_with_their_git_blob_ids(mirror: Mirror) -> None:
    result = await resolved(mirror, TINY)
    files = mirror.files[TINY]
    assert len(result.commit) == 40
    assert [file.path for file in result.files] == sorted(files)
    assert result.size_bytes == sum(len(content) for content in files.values())
    for file in result.files:
        assert file.sha256 is None and file.size == len(files[file.path])
        content = files[file.path]
        assert file.blob_id == hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    only = await asyncio.to_thread(resolve, mirror.endpoint, TINY, "main", None, ["*.json", "sub/*"], ["sub/*"])
    assert [file.path for file in only.files] == ["config.json"]


async def test_lfs_files_are_verified_by_their_sha256(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, LFS)
    content = mirror.files[LFS]["weights.safetensors"]
    weights = next(file for file in plan.files if file.path == "weights.safetensors")
    assert (weights.size, weights.sha256, weights.blob_id) == (len(content), sha256(content), None)
    result = await fetch(plan, mirror.endpoint, LFS, tmp_path / "s", None)
    assert result.verified and result.files["weights.safetensors"] == (len(content), sha256(content))
    await asyncio.to_thread(assert_staged, tmp_path / "s", mirror.files[LFS])

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "weights.safetensors.part").write_bytes(b"Y" + content[1:MB])
    with pytest.raises(ChecksumMismatchError, match="weights.safetensors: SHA-256 .* != published"):
        await fetch(plan, mirror.ranged, LFS, tmp_path / "t", None)


async def test_resolve_maps_unknown_repository_and_revision(mirror: Mirror) -> None:
    with pytest.raises(ModelNotFoundError, match="acme/absent"):
        await asyncio.to_thread(resolve, mirror.endpoint, "acme/absent", "main", None)
    with pytest.raises(RevisionNotFoundError, match="'v9'"):
        await asyncio.to_thread(resolve, mirror.endpoint, TINY, "v9", None)
    with pytest.raises(HubUnavailableError):
        await asyncio.to_thread(resolve, "http://127.0.0.1:9", TINY, "main", None)


async def test_fetch_verifies_every_file_and_reports_progress(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, BIG)
    events: list[ModelProgress] = []
    staging = tmp_path / "staging"
    result = await fetch(plan, mirror.endpoint, BIG, staging, None, events.append, progress_interval=0.05)
    await asyncio.to_thread(assert_staged, staging, mirror.files[BIG])
    assert result.verified and result.unverified_files == []
    assert result.bytes_transferred == plan.size_bytes
    assert result.files == {name: (len(data), sha256(data)) for name, data in mirror.files[BIG].items()}
    assert events[-1].bytes_done == events[-1].bytes_total == plan.size_bytes
    assert events[-1].files_done == 2 and events[-1].eta_s == 0
    assert all(event.files_total == 2 for event in events)

    # A second fetch finds every file complete: hashed, counted, nothing transferred.
    again = await fetch(plan, mirror.endpoint, BIG, staging, None)
    assert again.bytes_transferred == 0 and again.files == result.files and again.verified


async def test_fetch_of_small_files_including_an_empty_one(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, TINY)
    result = await fetch(plan, mirror.endpoint, TINY, tmp_path / "s", None, max_workers=2)
    await asyncio.to_thread(assert_staged, tmp_path / "s", mirror.files[TINY])
    assert result.verified and result.files["empty.txt"] == (0, sha256(b""))


async def test_partial_file_resumes_with_a_range(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, BIG)
    content = mirror.files[BIG]["model.safetensors"]
    staging = tmp_path / "staging"
    staging.mkdir()
    half = len(content) // 2
    (staging / "model.safetensors.part").write_bytes(content[:half])
    before = mirror.proxy.served
    result = await fetch(plan, mirror.ranged, BIG, staging, None)
    assert result.bytes_transferred == plan.size_bytes - half
    assert mirror.proxy.served - before == plan.size_bytes - half
    assert result.verified
    await asyncio.to_thread(assert_staged, staging, mirror.files[BIG])


async def test_server_ignoring_the_range_restarts_the_file(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, BIG)
    content = mirror.files[BIG]["model.safetensors"]
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.safetensors.part").write_bytes(content[: 5 * MB])
    result = await fetch(plan, mirror.endpoint, BIG, staging, None)  # olah answers 200 to any Range
    assert result.bytes_transferred == plan.size_bytes and result.verified
    await asyncio.to_thread(assert_staged, staging, mirror.files[BIG])


async def test_tampered_partial_is_a_checksum_error_naming_the_file(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, TINY)
    content = mirror.files[TINY]["model.safetensors"]
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "model.safetensors.part").write_bytes(b"X" + content[1 : MB])
    with pytest.raises(ChecksumMismatchError, match="model.safetensors: git blob id") as caught:
        await fetch(plan, mirror.ranged, TINY, staging, None)
    assert not caught.value.non_retryable
    assert not (staging / "model.safetensors.part").exists() and not (staging / "model.safetensors").exists()
    # The retry Temporal would make fetches the file from zero and succeeds.
    result = await fetch(plan, mirror.ranged, TINY, staging, None)
    assert result.verified
    await asyncio.to_thread(assert_staged, staging, mirror.files[TINY])


async def test_two_concurrent_fetches_of_one_commit_download_once(mirror: Mirror, tmp_path: Path) -> None:
    plan = await resolved(mirror, BIG)
    staging = tmp_path / "staging"
    before = mirror.proxy.served
    first, second = await asyncio.gather(
        fetch(plan, mirror.ranged, BIG, staging, None), fetch(plan, mirror.ranged, BIG, staging, None)
    )
    assert first.bytes_transferred + second.bytes_transferred == plan.size_bytes
    assert mirror.proxy.served - before == plan.size_bytes
    assert first.files == second.files and first.verified and second.verified


async def test_too_little_free_disk_is_refused_before_fetching(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(model_fetch.shutil, "disk_usage", lambda path: usage(10**12, 10**12, 4_100_000_000))
    with pytest.raises(VolumeFullError) as caught:
        check_free_disk(tmp_path / "not" / "yet", 12_300_000_000)
    assert str(caught.value) == (
        f"needs 12.3 GB free under {tmp_path}, has 4.1 GB; free space or evict the cache: berth model cache evict"
    )
    plan = await resolved(mirror, TINY)
    monkeypatch.setattr(model_fetch.shutil, "disk_usage", lambda path: usage(10**12, 10**12, 10))
    before = mirror.proxy.served
    with pytest.raises(VolumeFullError, match="needs 0.0 GB free"):
        await fetch(plan, mirror.ranged, TINY, tmp_path / "staging", None)
    assert mirror.proxy.served == before


async def test_token_is_sent_but_never_in_errors_or_logs(
    mirror: Mirror, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(403, text=f"denied {request.headers.get('authorization')}")

    plan = await resolved(mirror, TINY)
    with pytest.raises(Exception) as caught:
        await fetch(plan, "http://hub.invalid", TINY, tmp_path / "s", SECRET, transport=httpx.MockTransport(handler))
    assert seen and all(header == f"Bearer {SECRET}" for header in seen)
    assert "refused" in str(caught.value)
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    assert all(SECRET not in repr(error) and SECRET not in str(error) for error in chain)
    with pytest.raises(ModelNotFoundError) as missing:
        await asyncio.to_thread(resolve, mirror.endpoint, "acme/absent", "main", SECRET)
    assert SECRET not in str(missing.value)
    assert SECRET not in caplog.text


async def test_a_file_without_a_published_checksum_is_reported_unverified(tmp_path: Path) -> None:
    body = b"no checksum for me"

    async def streamed() -> AsyncIterator[bytes]:  # a real stream: bytes content would arrive pre-read
        yield body

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.raw_path == b"/acme/x/resolve/" + b"c" * 40 + b"/dir/a%20b.txt"
        return httpx.Response(200, content=streamed())

    plan = Resolved(commit="c" * 40, files=[RemoteFile("dir/a b.txt", len(body))], size_bytes=len(body))
    result = await fetch(plan, "http://hub.invalid", "acme/x", tmp_path / "s", None,
                         transport=httpx.MockTransport(handler))
    assert not result.verified and result.unverified_files == ["dir/a b.txt"]
    assert (tmp_path / "s" / "dir" / "a b.txt").read_bytes() == body


FETCH_SCRIPT = """
import asyncio, sys
from pathlib import Path
from activities.model_fetch import fetch
from activities.hub import resolve
plan = resolve(sys.argv[1], sys.argv[2], "main", None)
asyncio.run(fetch(plan, sys.argv[3], sys.argv[2], Path(sys.argv[4]), None, max_workers=1))
"""


def start_and_kill_midway(mirror: Mirror, staging: Path) -> int:
    """Run a fetch in a subprocess, SIGKILL it once the big `.part` holds bytes; returns its size then."""
    part = staging / "model.safetensors.part"
    process = subprocess.Popen(
        [sys.executable, "-c", FETCH_SCRIPT, mirror.endpoint, BIG, mirror.ranged, str(staging)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if part.exists() and part.stat().st_size > 0:
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)  # polling a file another process writes: there is no event to wait on
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the fetch finished before it could be interrupted"
    return part.stat().st_size


async def test_killed_fetch_resumes_without_fetching_bytes_twice(mirror: Mirror, tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    on_disk = await asyncio.to_thread(start_and_kill_midway, mirror, staging)
    plan = await resolved(mirror, BIG)
    assert 0 < on_disk < plan.size_bytes
    before = mirror.proxy.served
    result = await fetch(plan, mirror.ranged, BIG, staging, None)
    # One worker, files in path order: config.json was complete before the big file began.
    assert result.bytes_transferred == len(mirror.files[BIG]["model.safetensors"]) - on_disk
    assert mirror.proxy.served - before == result.bytes_transferred
    assert result.verified
    await asyncio.to_thread(assert_staged, staging, mirror.files[BIG])
