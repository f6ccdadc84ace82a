"""Tests for activities.weights: real huggingface_hub against real olah (and a fake Hub) on loopback."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import pytest_asyncio

from activities.errors import (
    GatedModelError,
    HubUnavailableError,
    ModelNotFoundError,
    RevisionNotFoundError,
    VolumeFullError,
)
from activities.weights import WeightsRequest, _map_error, download_weights
from activities.weights_progress import DownloadProgress
from berth.hf_mirror import MirrorConfig, publish_repo, run_mirror

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = "acme/small"
BIG = "acme/big"
MB = 1024 * 1024


@dataclass(frozen=True)
class Mirror:
    endpoint: str
    files: dict[str, dict[str, bytes]]  # repo id -> path -> content
    state_dir: Path

    def resolve_requests(self) -> int:
        """How many file downloads olah has served so far (from its access log)."""
        return (self.state_dir / "olah.out").read_text().count("/resolve/")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mirror(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mirror]:
    root = tmp_path_factory.mktemp("hf")
    files = {
        SMALL: {
            "config.json": b'{"model_type": "llama", "hidden_size": 8}\n',
            "model.safetensors": os.urandom(3 * MB),
            "README.md": b"---\nlicense: apache-2.0\n---\n# small\n",
        },
        # Big enough that a download can be caught half-way: olah streams in 4 KiB chunks.
        BIG: {
            "config.json": b'{"model_type": "llama"}\n',
            "model-00001-of-00002.safetensors": os.urandom(24 * MB),
            "model-00002-of-00002.safetensors": os.urandom(64 * MB),
        },
    }
    for repo_id, content in files.items():
        await asyncio.to_thread(publish_repo, root / "mirrors", repo_id, content)
    config = MirrorConfig(mirrors_dir=root / "mirrors", state_dir=root / "olah")
    async with run_mirror(config) as endpoint:
        yield Mirror(endpoint=endpoint, files=files, state_dir=root / "olah")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_snapshot(local_dir: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        assert sha256(local_dir / name) == hashlib.sha256(content).hexdigest(), name
    assert not list(local_dir.rglob("*.incomplete"))


async def test_download_reports_progress_then_hits_the_volume_cache(mirror: Mirror, tmp_path: Path) -> None:
    events: list[DownloadProgress] = []
    request = WeightsRequest(
        repo_id=BIG, local_dir=str(tmp_path / "vol"), endpoint=mirror.endpoint, progress_interval_seconds=0.05
    )
    result = await download_weights(request, events.append)

    total = sum(len(content) for content in mirror.files[BIG].values())
    assert (result.bytes_total, result.files, result.bytes_downloaded) == (total, 3, total)
    assert not result.cache_hit
    assert len(result.commit) == 40
    await asyncio.to_thread(assert_snapshot, tmp_path / "vol", mirror.files[BIG])
    assert len(events) >= 3
    assert all(event.bytes_total == total and event.files_total == 3 for event in events)
    assert events[-1].bytes_done == total and events[-1].files_done == 3 and events[-1].eta_seconds == 0
    assert any(0 < event.bytes_done < total for event in events)  # partials are counted while they grow
    assert any(event.bytes_per_second > 0 for event in events)

    served = await asyncio.to_thread(mirror.resolve_requests)
    again = await download_weights(request, events.append)
    assert again.cache_hit and again.bytes_downloaded == 0 and again.commit == result.commit
    assert await asyncio.to_thread(mirror.resolve_requests) == served  # not even a HEAD for a file


async def test_patterns_limit_what_is_fetched(mirror: Mirror, tmp_path: Path) -> None:
    request = WeightsRequest(
        repo_id=SMALL,
        local_dir=str(tmp_path / "vol"),
        endpoint=mirror.endpoint,
        allow_patterns=("*.json", "*.md"),
        ignore_patterns=("README.md",),
    )
    result = await download_weights(request)
    assert result.files == 1 and result.bytes_total == len(mirror.files[SMALL]["config.json"])
    names = await asyncio.to_thread(lambda: sorted(p.name for p in (tmp_path / "vol").iterdir()))
    assert names == [".cache", "config.json"]


DOWNLOAD_SCRIPT = """
import asyncio, sys
from activities.weights import WeightsRequest, download_weights
request = WeightsRequest(repo_id=sys.argv[1], local_dir=sys.argv[2], endpoint=sys.argv[3], max_workers=1)
asyncio.run(download_weights(request))
"""


def start_and_kill_midway(mirror: Mirror, local_dir: Path) -> None:
    """Run a download in a subprocess and SIGKILL it once shard 1 is complete and shard 2 is half-way."""
    first = local_dir / "model-00001-of-00002.safetensors"
    first_size = len(mirror.files[BIG][first.name])
    process = subprocess.Popen(
        [sys.executable, "-c", DOWNLOAD_SCRIPT, BIG, str(local_dir), mirror.endpoint],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and process.poll() is None:
            partials = list(local_dir.rglob("*.incomplete"))
            if first.exists() and first.stat().st_size == first_size and partials:
                if any(partial.stat().st_size > 0 for partial in partials):
                    process.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.005)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the download finished before it could be interrupted"


async def test_killed_download_resumes_without_refetching_finished_files(
    mirror: Mirror, tmp_path: Path
) -> None:
    local_dir = tmp_path / "vol"
    await asyncio.to_thread(start_and_kill_midway, mirror, local_dir)
    first = local_dir / "model-00001-of-00002.safetensors"
    identity = await asyncio.to_thread(lambda: (first.stat().st_ino, first.stat().st_mtime_ns))
    dead_partials = await asyncio.to_thread(lambda: list(local_dir.rglob("*.incomplete")))
    assert dead_partials and not (local_dir / "model-00002-of-00002.safetensors").exists()

    request = WeightsRequest(repo_id=BIG, local_dir=str(local_dir), endpoint=mirror.endpoint)
    result = await download_weights(request)
    assert not result.cache_hit
    assert result.bytes_downloaded == len(mirror.files[BIG]["model-00002-of-00002.safetensors"])
    assert await asyncio.to_thread(lambda: (first.stat().st_ino, first.stat().st_mtime_ns)) == identity
    # The killed attempt's partial is removed (it would never be reused) and the snapshot is intact.
    await asyncio.to_thread(assert_snapshot, local_dir, mirror.files[BIG])


async def test_unknown_repository_is_a_clear_non_retryable_error(mirror: Mirror, tmp_path: Path) -> None:
    request = WeightsRequest(repo_id="acme/absent", local_dir=str(tmp_path / "vol"), endpoint=mirror.endpoint)
    with pytest.raises(ModelNotFoundError, match="acme/absent not found.*HfTokenSecret") as caught:
        await download_weights(request)
    assert caught.value.non_retryable and isinstance(caught.value, LookupError)


async def test_unknown_revision_is_told_apart_from_unknown_repository(mirror: Mirror, tmp_path: Path) -> None:
    request = WeightsRequest(
        repo_id=SMALL, revision="v9", local_dir=str(tmp_path / "vol"), endpoint=mirror.endpoint
    )
    with pytest.raises(RevisionNotFoundError, match="no revision 'v9'") as caught:
        await download_weights(request)
    assert caught.value.non_retryable


async def test_unreachable_endpoint_is_retryable(tmp_path: Path) -> None:
    request = WeightsRequest(repo_id=SMALL, local_dir=str(tmp_path / "vol"), endpoint="http://127.0.0.1:9")
    with pytest.raises(HubUnavailableError) as caught:
        await download_weights(request)
    assert not caught.value.non_retryable


def mount_small_tmpfs(path: Path) -> bool:
    """Mount a 1 MiB tmpfs on `path`: a real small filesystem (needs root; the tests skip otherwise)."""
    command = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)]
    return subprocess.run(command, capture_output=True).returncode == 0


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True)


async def test_volume_too_small_fails_before_fetching(mirror: Mirror, tmp_path: Path) -> None:
    mount = tmp_path / "small-volume"
    await asyncio.to_thread(mount.mkdir)
    if not await asyncio.to_thread(mount_small_tmpfs, mount):
        pytest.fail("mounting a small tmpfs needs root (CI and make test run as root)")
    try:
        served = await asyncio.to_thread(mirror.resolve_requests)
        request = WeightsRequest(repo_id=SMALL, local_dir=str(mount / "vol"), endpoint=mirror.endpoint)
        with pytest.raises(VolumeFullError, match="bytes free") as caught:
            await download_weights(request)
        assert isinstance(caught.value, OSError) and caught.value.non_retryable
        assert await asyncio.to_thread(mirror.resolve_requests) == served
    finally:
        await asyncio.to_thread(unmount, mount)


@pytest.mark.filterwarnings("ignore:Not enough free disk space")
async def test_disk_full_mid_download_leaves_no_file_taken_as_complete(
    mirror: Mirror, tmp_path: Path
) -> None:
    # The volume has room (the pre-flight check passes) but the directory huggingface_hub writes partials
    # into is a 1 MiB tmpfs: the kernel answers ENOSPC half-way through the 3 MiB file.
    local_dir = tmp_path / "vol"
    download_dir = local_dir / ".cache" / "huggingface" / "download"
    await asyncio.to_thread(download_dir.mkdir, parents=True)
    if not await asyncio.to_thread(mount_small_tmpfs, download_dir):
        pytest.fail("mounting a small tmpfs needs root (CI and make test run as root)")
    request = WeightsRequest(repo_id=SMALL, local_dir=str(local_dir), endpoint=mirror.endpoint, max_workers=1)
    try:
        with pytest.raises(VolumeFullError, match="is full") as caught:
            await download_weights(request)
        assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.ENOSPC
        assert not (local_dir / "model.safetensors").exists()
        assert not await asyncio.to_thread(lambda: list(download_dir.glob("*.incomplete")))
    finally:
        await asyncio.to_thread(unmount, download_dir)
    result = await download_weights(request)  # space freed: the next attempt completes
    assert not result.cache_hit
    await asyncio.to_thread(assert_snapshot, local_dir, mirror.files[SMALL])


def test_enospc_maps_to_volume_full() -> None:
    request = WeightsRequest(repo_id=SMALL, local_dir="/volumes/w", endpoint="http://127.0.0.1:1")
    error = _map_error(OSError(errno.ENOSPC, "No space left on device"), request)
    assert isinstance(error, VolumeFullError) and "/volumes/w is full" in str(error)


# --- A fake Hub on loopback: olah cannot emulate gated repositories, so we answer like huggingface.co. ---

GATED_SHA = "0123456789abcdef0123456789abcdef01234567"
GATED_CONFIG = b'{"model_type": "llama"}\n'


class FakeHub(BaseHTTPRequestHandler):
    """Answers the calls huggingface_hub makes, with the Hub's status codes and X-Error-Code headers."""

    # Set per test: whether model_info admits the repo is gated, and the status for metadata calls.
    advertise_gated: bool = True
    info_status: int = 200
    seen_authorization: list[str | None] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        FakeHub.seen_authorization.append(self.headers.get("authorization"))
        if self.path.startswith("/api/models/acme/gated/revision/"):
            if self.info_status != 200:
                self.answer(self.info_status, {"error": "Service Unavailable"})
                return
            self.answer(
                200,
                {
                    "id": "acme/gated",
                    "sha": GATED_SHA,
                    "private": False,
                    "gated": "manual" if self.advertise_gated else False,
                    "siblings": [{"rfilename": "config.json", "size": len(GATED_CONFIG), "blobId": "b" * 40}],
                },
            )
        elif self.path.startswith("/api/models/acme/gated/tree/"):
            entry = {"type": "file", "oid": "b" * 40, "size": len(GATED_CONFIG), "path": "config.json"}
            self.answer(200, [entry])
        elif self.path.startswith("/acme/gated/resolve/"):
            # The Hub: 401 when anonymous, 403 when the token's account has not been granted access.
            status = 403 if self.headers.get("authorization") else 401
            self.answer(
                status,
                {"error": "Access to model acme/gated is restricted."},
                {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model acme/gated is restricted."},
            )
        else:
            self.answer(404, {"error": "not found"}, {"X-Error-Code": "EntryNotFound"})

    def answer(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # A token in the worker's environment must never be borrowed for a request that carries none.
    monkeypatch.setenv("HF_TOKEN", "hf_operator_token")
    FakeHub.advertise_gated, FakeHub.info_status, FakeHub.seen_authorization = True, 200, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_gated_model_without_token_names_the_secret(fake_hub: str, tmp_path: Path) -> None:
    request = WeightsRequest(repo_id="acme/gated", local_dir=str(tmp_path / "vol"), endpoint=fake_hub)
    with pytest.raises(GatedModelError, match="HfTokenSecret=secret://") as caught:
        await download_weights(request)
    assert caught.value.non_retryable and isinstance(caught.value, PermissionError)
    assert FakeHub.seen_authorization and set(FakeHub.seen_authorization) == {None}


async def test_gated_refusal_on_download_without_token(fake_hub: str, tmp_path: Path) -> None:
    # The metadata does not say "gated" (private mirrors often do not); the file download is refused 401.
    FakeHub.advertise_gated = False
    request = WeightsRequest(repo_id="acme/gated", local_dir=str(tmp_path / "vol"), endpoint=fake_hub)
    with pytest.raises(GatedModelError, match="is a gated model: set HfTokenSecret") as caught:
        await download_weights(request)
    assert type(caught.value.__cause__).__name__ == "GatedRepoError"  # huggingface_hub's own, from a 401
    assert not (tmp_path / "vol" / "config.json").exists()


async def test_token_without_access_says_so_and_is_never_shown(fake_hub: str, tmp_path: Path) -> None:
    token = "hf_secret_value_123"
    request = WeightsRequest(
        repo_id="acme/gated", local_dir=str(tmp_path / "vol"), endpoint=fake_hub, token=token
    )
    assert token not in repr(request)
    with pytest.raises(GatedModelError, match="token from HfTokenSecret has no access") as caught:
        await download_weights(request)
    assert token not in str(caught.value)
    assert f"Bearer {token}" in FakeHub.seen_authorization


async def test_hub_outage_is_retryable_after_one_attempt(fake_hub: str, tmp_path: Path) -> None:
    FakeHub.info_status = 503
    request = WeightsRequest(repo_id="acme/gated", local_dir=str(tmp_path / "vol"), endpoint=fake_hub)
    with pytest.raises(HubUnavailableError, match="503") as caught:
        await download_weights(request)
    assert not caught.value.non_retryable
    assert len(FakeHub.seen_authorization) == 1  # no hidden retries: Temporal owns them
