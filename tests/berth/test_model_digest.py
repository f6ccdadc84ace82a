"""A model directory's digest on real files: the SHA-256 of the sorted manifest (computed here by hand),
independent of creation order and worker count; the walk's refusals; compare naming every difference."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from berth.model_digest import (
    ManifestEntry,
    compare,
    digest_of,
    hash_file,
    manifest_of,
    manifest_text,
    read_manifest,
    scan_directory,
)


def _write(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


FILES = {"model.safetensors": b"\x00" * 3_000_000 + b"weights", "config.json": b'{"a": 1}',
         "sub dir/tokenizer.json": b"tok", "B.txt": b"upper sorts before lower"}


def test_the_digest_is_the_sha256_of_the_sorted_manifest(tmp_path: Path) -> None:
    _write(tmp_path, FILES)
    lines = sorted(f"{name} {len(data)} {hashlib.sha256(data).hexdigest()}\n" for name, data in FILES.items())
    expected_text = "".join(lines)
    assert expected_text.startswith("B.txt ")  # bytewise: 'B' (0x42) before 'c' (0x63)
    entries = manifest_of(tmp_path, max_files=10)
    assert manifest_text(entries) == expected_text
    assert digest_of(entries) == hashlib.sha256(expected_text.encode()).hexdigest()
    assert digest_of(entries) != hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    assert [entry.path for entry in entries] == sorted(FILES)


def test_the_digest_depends_on_neither_creation_order_nor_threads(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _write(first, FILES)
    _write(second, dict(reversed(list(FILES.items()))))
    digests = {digest_of(manifest_of(first, 10, workers=4)), digest_of(manifest_of(second, 10, workers=1)),
               digest_of(scan_directory(first, 10)), digest_of(reversed(manifest_of(second, 10)))}
    assert len(digests) == 1


def test_hash_file_matches_hashlib_with_a_reused_buffer(tmp_path: Path) -> None:
    buffer = bytearray(4096)
    for size in (0, 1, 4096, 10_001):
        path = tmp_path / f"f{size}"
        path.write_bytes(os.urandom(size))
        assert hash_file(path, buffer) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_tampered_missing_or_extra_file_is_named(tmp_path: Path) -> None:
    _write(tmp_path, FILES)
    expected = manifest_of(tmp_path, 10)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # same size, other bytes
    (tmp_path / "config.json").unlink()
    (tmp_path / "extra.bin").write_bytes(b"new")
    (tmp_path / "B.txt").write_bytes(b"short")
    lines = compare(expected, manifest_of(tmp_path, 10))
    old = hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    assert lines == ["B.txt: size differs (expected 24 bytes, found 5)",
                     "config.json: missing",
                     "extra.bin: not in the manifest",
                     f"model.safetensors: SHA-256 differs (expected {old[:12]}…, found "
                     f"{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}…)"]
    assert compare(expected, expected) == []


def test_the_file_cap_is_refused_before_anything_is_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, {f"f{index}.safetensors": b"x" for index in range(4)})

    def never(*_args: object) -> tuple[str, int]:
        raise AssertionError("hashed before the count was checked")

    monkeypatch.setattr("berth.model_digest._hash_counted", never)
    with pytest.raises(ValueError, match="more than 3 files"):
        manifest_of(tmp_path, max_files=3)


def test_symlinks_inside_are_followed_and_escapes_refused(tmp_path: Path) -> None:
    root = tmp_path / "model"
    _write(root, {"real/weights.safetensors": b"w"})
    (root / "alias.safetensors").symlink_to(root / "real" / "weights.safetensors")
    (root / "linked").symlink_to(root / "real")
    assert [entry.path for entry in manifest_of(root, 10)] == [
        "alias.safetensors", "linked/weights.safetensors", "real/weights.safetensors"]
    (tmp_path / "secret").write_text("outside")
    (root / "escape").symlink_to("../secret")
    with pytest.raises(ValueError, match="escape is a symlink to .*outside the model directory"):
        manifest_of(root, 10)
    (root / "escape").unlink()
    (root / "real" / "loop").symlink_to(root)
    with pytest.raises(ValueError, match="loop"):
        manifest_of(root, 10)


def test_only_a_top_level_bookkeeping_dir_is_left_out(tmp_path: Path) -> None:
    _write(tmp_path, {".berth/state": b"s", "nested/.berth/kept": b"k", ".hidden": b"h"})
    assert [entry.path for entry in manifest_of(tmp_path, 10)] == [".hidden", "nested/.berth/kept"]


def test_a_fifo_is_refused_not_skipped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="neither a regular file nor a directory"):
        manifest_of(tmp_path, 10)


@pytest.mark.parametrize("path", ["/etc/passwd", "a/../b", "../x", "a\nb", "", "a//b", "./a"])
def test_a_manifest_refuses_a_path_it_cannot_hold(path: str) -> None:
    with pytest.raises(ValueError) as refused:
        manifest_text([ManifestEntry(path, 1, "0" * 64)])
    assert "\n" not in str(refused.value)


def test_read_manifest_round_trips_and_refuses_malformed_lines(tmp_path: Path) -> None:
    _write(tmp_path, FILES)
    entries = manifest_of(tmp_path, 10)
    assert read_manifest(manifest_text(entries)) == entries
    assert read_manifest("") == []
    text = manifest_text(entries)
    for bad in (text.rstrip("\n"), "x 1\n", f"x -1 {'0' * 64}\n", f"x 1 {'G' * 64}\n",
                "".join(reversed(text.splitlines(keepends=True))), text + text.splitlines(keepends=True)[0]):
        with pytest.raises(ValueError):
            read_manifest(bad)
