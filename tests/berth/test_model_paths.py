"""The managed cache's layout and path safety on real directories: escapes by '../' and by symlink refused,
placing a digest (read-only, its manifest, a second copy of the same bytes dropped), eviction's plan."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from berth.model_digest import digest_of, manifest_of, read_manifest
from berth.model_paths import (
    ModelCache,
    ModelPathError,
    allowed_model_dirs,
    evict_plan,
    place_digest,
    remove_digest,
    safe_relative,
    staged_path,
)

DIGEST = "ab" * 32
COMMIT = "c" * 40


def test_the_layout_and_its_refusals(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    assert cache.digest_dir(DIGEST) == tmp_path / "sha256" / DIGEST
    assert cache.manifest_path(DIGEST) == tmp_path / "manifests" / f"{DIGEST}.txt"
    assert cache.partial_dir("HuggingFaceTB/SmolLM2-135M", COMMIT) == (
        tmp_path / "partial" / "HuggingFaceTB" / "SmolLM2-135M" / COMMIT)
    assert cache.partial_dir("org/name", "d" * 64).name == "d" * 64
    assert cache.lock_path(DIGEST) == tmp_path / "locks" / f"{DIGEST}.lock"
    for bad_digest in ("AB" * 32, "ab" * 31, "../" + "a" * 61):
        with pytest.raises(ModelPathError, match="not a SHA-256 digest"):
            cache.digest_dir(bad_digest)
    for bad_repo in ("org/..", "../name", "org/name/extra", "org", ".org/name", "org/na me"):
        with pytest.raises(ModelPathError, match="not a repository name"):
            cache.partial_dir(bad_repo, COMMIT)
    with pytest.raises(ModelPathError, match="not a commit"):
        cache.partial_dir("org/name", "main")
    with pytest.raises(ModelPathError, match="not a lock key"):
        cache.lock_path("../x")


@pytest.mark.parametrize("text", ["/etc/passwd", "a/../b", "..", "a//b", "./a", "a\\b", "a\x00b", "a\nb",
                                  "a\x7fb", ""])
def test_safe_relative_refuses_what_could_leave_the_directory(text: str) -> None:
    with pytest.raises(ModelPathError) as refused:
        safe_relative(text)
    assert "\n" not in str(refused.value)


def test_safe_relative_keeps_an_ordinary_path() -> None:
    assert safe_relative("onnx/model q4.safetensors") == "onnx/model q4.safetensors"


def test_a_staged_path_must_stay_inside_an_allowed_dir_after_resolving(tmp_path: Path) -> None:
    allowed = tmp_path / "models"
    (allowed / "llama").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (allowed / "sneaky").symlink_to(tmp_path / "etc")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "inside").symlink_to(allowed / "llama")
    dirs = allowed_model_dirs(f"{tmp_path / 'nothing'}{os.pathsep}{allowed}{os.pathsep}")
    assert staged_path(str(allowed / "llama"), dirs) == (allowed / "llama").resolve()
    assert staged_path(str(tmp_path / "elsewhere" / "inside"), dirs) == (allowed / "llama").resolve()
    dotted = f"{allowed}/../etc"
    # The refusal names the path as given (a long tmp path, e.g. under an xdist worker's basetemp, is shortened
    # with its length, so only its start is pinned here).
    named = "^" + re.escape(f"'{dotted[:48]}") + ".*' is outside the allowed model dirs"
    with pytest.raises(ModelPathError, match=named):
        staged_path(dotted, dirs)
    with pytest.raises(ModelPathError, match="is outside the allowed model dirs"):
        staged_path(str(allowed / "sneaky"), dirs)
    with pytest.raises(ModelPathError, match="does not exist"):
        staged_path(str(allowed / "missing"), dirs)
    with pytest.raises(ModelPathError, match="not an absolute path"):
        staged_path("models/llama", dirs)
    with pytest.raises(ModelPathError, match=r"no model dir is allowed on this cluster; an administrator lists"):
        staged_path(str(allowed / "llama"), allowed_model_dirs(""))
    with pytest.raises(ModelPathError, match="not an absolute path"):
        allowed_model_dirs("relative/dir")


def _staging(cache: ModelCache, content: bytes) -> Path:
    staging = cache.partial_dir("org/name", COMMIT)
    (staging / "sub").mkdir(parents=True)
    (staging / "model.safetensors").write_bytes(content)
    (staging / "sub" / "config.json").write_bytes(b"{}")
    return staging


def test_place_digest_locks_the_bytes_writes_the_manifest_and_dedupes(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "cache")
    staging = _staging(cache, b"weights")
    entries = manifest_of(staging, 10)
    digest = digest_of(entries)
    placed = place_digest(staging, cache, digest, entries)
    assert placed == cache.digest_dir(digest) and not staging.exists()
    assert stat.S_IMODE((placed / "model.safetensors").stat().st_mode) == 0o444
    assert stat.S_IMODE((placed / "sub").stat().st_mode) == 0o555
    assert stat.S_IMODE(placed.stat().st_mode) == 0o555
    assert read_manifest(cache.manifest_path(digest).read_text()) == entries
    assert digest_of(manifest_of(placed, 10)) == digest

    again = _staging(cache, b"weights")  # another job made the same bytes
    assert place_digest(again, cache, digest, manifest_of(again, 10)) == placed
    assert not again.exists() and (placed / "model.safetensors").read_bytes() == b"weights"
    assert cache.cached_digests() == {digest: (9, pytest.approx(placed.stat().st_mtime))}

    with pytest.raises(ValueError, match="does not have digest"):
        place_digest(_staging(cache, b"other"), cache, DIGEST, entries)
    assert remove_digest(cache, digest) == 9
    assert not placed.exists() and not cache.manifest_path(digest).exists()
    assert cache.cached_digests() == {} and cache.size_of(digest) == 0


def test_touch_moves_a_digest_to_most_recently_used(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    staging = _staging(cache, b"w")
    entries = manifest_of(staging, 10)
    digest = digest_of(entries)
    placed = place_digest(staging, cache, digest, entries)
    os.utime(placed, (1_000, 1_000))
    assert cache.cached_digests()[digest][1] == 1_000
    cache.touch(digest)
    assert cache.cached_digests()[digest][1] > 1_000


def test_eviction_takes_the_oldest_unreferenced_first_and_keeps_referenced() -> None:
    old, older, oldest, newest = "1" * 64, "2" * 64, "3" * 64, "4" * 64
    cached = {old: (100, 30.0), older: (100, 20.0), oldest: (100, 10.0), newest: (100, 40.0)}
    assert evict_plan(cached, set(), budget=400) == ([], [])
    assert evict_plan(cached, set(), budget=250) == ([oldest, older], [])
    assert evict_plan(cached, {oldest}, budget=250) == ([older, old], [oldest])
    # Only referenced digests left: over budget stays over budget rather than evict a model in use.
    assert evict_plan(cached, {old, older, oldest, newest}, budget=0) == ([], [oldest, older, old, newest])
    assert evict_plan(cached, {newest}, budget=0) == ([oldest, older, old], [newest])
