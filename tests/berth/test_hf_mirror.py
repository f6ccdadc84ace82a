"""Tests for berth.hf_mirror: a real olah process on loopback serving a small git repository."""

from __future__ import annotations

import asyncio
import os
import socket
import tomllib
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile

from berth.hf_mirror import (
    MirrorConfig,
    MirrorProcess,
    MirrorStartError,
    publish_repo,
    render_olah_config,
    run_mirror,
)

REPO_ID = "acme/tiny"


def tiny_files() -> dict[str, bytes]:
    return {
        "config.json": b'{"model_type": "llama"}\n',
        "model.safetensors": os.urandom(2 * 1024 * 1024),
        "sub/notes.txt": b"nested path\n",
    }


def live_members_of_group(pgid: int) -> list[int]:
    """PIDs in process group `pgid` that are not zombies (a container's init may never reap them)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_render_olah_config_is_offline_and_points_at_itself(tmp_path: Path) -> None:
    config = MirrorConfig(mirrors_dir=tmp_path / "mirrors", state_dir=tmp_path / "state")
    parsed = tomllib.loads(render_olah_config(config, 18123))
    assert parsed["basic"]["host"] == "127.0.0.1"
    assert parsed["basic"]["port"] == 18123
    assert parsed["basic"]["mirrors-path"] == [str((tmp_path / "mirrors").resolve())]
    assert parsed["basic"]["repos-path"] == str((tmp_path / "state" / "repos").resolve())
    assert parsed["basic"]["mirror-scheme"] == "http"
    assert parsed["basic"]["mirror-netloc"] == parsed["basic"]["mirror-lfs-netloc"] == "127.0.0.1:18123"
    assert parsed["accessibility"]["offline"] is True


def test_config_rejects_bad_port(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="port"):
        MirrorConfig(mirrors_dir=tmp_path, state_dir=tmp_path, port=70000)


def test_publish_repo_commit_depends_on_files_only(tmp_path: Path) -> None:
    files = tiny_files()
    first = publish_repo(tmp_path / "a", REPO_ID, files)
    second = publish_repo(tmp_path / "b", REPO_ID, files)
    again = publish_repo(tmp_path / "a", REPO_ID, files)  # replaces the existing repository
    assert first == second == again
    head = (tmp_path / "a" / "models" / REPO_ID / ".git" / "HEAD").read_text()
    assert head.strip() == "ref: refs/heads/main"


def exercise_with_huggingface_hub(endpoint: str, files: dict[str, bytes], commit: str, cache: Path) -> None:
    api = HfApi(endpoint=endpoint, token=False)
    assert api.model_info(REPO_ID, revision="main").sha == commit
    # A quirk to know: olah answers a revision-less lookup of a local mirror "Repository not found".
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(REPO_ID)
    tree = {entry.path: entry for entry in api.list_repo_tree(REPO_ID, recursive=True)}
    model = tree["model.safetensors"]
    assert isinstance(model, RepoFile) and model.size == len(files["model.safetensors"])
    path = hf_hub_download(REPO_ID, "sub/notes.txt", endpoint=endpoint, token=False, cache_dir=cache)
    assert Path(path).read_bytes() == files["sub/notes.txt"]


async def test_run_mirror_serves_repository_to_huggingface_hub(tmp_path: Path) -> None:
    files = tiny_files()
    commit = await asyncio.to_thread(publish_repo, tmp_path / "mirrors", REPO_ID, files)
    config = MirrorConfig(mirrors_dir=tmp_path / "mirrors", state_dir=tmp_path / "state")
    async with run_mirror(config) as endpoint:
        await asyncio.to_thread(exercise_with_huggingface_hub, endpoint, files, commit, tmp_path / "cache")
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.TransportError):
            await client.get(endpoint + "/api/models/acme/tiny/revision/main")
    state = await asyncio.to_thread(lambda: {path.name for path in (tmp_path / "state").iterdir()})
    # olah writes only inside state_dir: its config, stdout and logs (its cache stays unused offline).
    assert state <= {"olah.toml", "olah.out", "logs", "repos"}
    log = await asyncio.to_thread((tmp_path / "state" / "olah.out").read_text)
    assert "Uvicorn running" in log


def test_sync_start_stop_for_a_supervisor(tmp_path: Path) -> None:
    publish_repo(tmp_path / "mirrors", REPO_ID, tiny_files())
    mirror = MirrorProcess(MirrorConfig(mirrors_dir=tmp_path / "mirrors", state_dir=tmp_path / "state"))
    url = mirror.start()
    try:
        answer = httpx.get(f"{url}/api/models/{REPO_ID}/revision/main", timeout=5)
        assert answer.status_code == 200
        assert httpx.get(f"{url}/api/models/acme/absent/revision/main", timeout=5).status_code == 401
        pid = mirror.pid
        assert pid is not None and os.getpgid(pid) == pid  # leads its own process group
    finally:
        status = mirror.stop()
    assert status is not None
    # olah's GitPython helpers (`git cat-file --batch`) live in its group and must be gone too.
    assert live_members_of_group(pid) == []


def test_start_fails_fast_when_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))  # bound, not listening: olah cannot bind, probes are refused
        port = blocker.getsockname()[1]
        mirror = MirrorProcess(
            MirrorConfig(mirrors_dir=tmp_path / "mirrors", state_dir=tmp_path / "state", port=port)
        )
        with pytest.raises(MirrorStartError, match="exited"):
            mirror.start()
        mirror.stop()
