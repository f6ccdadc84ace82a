"""Scanning's policy on manifests of real files: pickles refused by name (a `.bin` is not one), the file
cap, the declared format present; signatures checked with hmac, a missing key never a pass."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from berth.model_digest import ManifestEntry, digest_of, manifest_of
from berth.model_scan import ModelScanError, check_signature, scan, signature_of

SHA = "0" * 64


def _entries(*paths: str) -> list[ManifestEntry]:
    return [ManifestEntry(path, 10, SHA) for path in paths]


def test_a_safetensors_model_with_a_bin_file_passes(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"w" * 100)
    (tmp_path / "pytorch_model.bin").write_bytes(b"b" * 7)
    (tmp_path / "config.json").write_bytes(b"{}")
    report = scan(manifest_of(tmp_path, 10), max_files=10, format="safetensors")
    assert (report.files, report.safetensors_files, report.gguf_files, report.bytes) == (3, 1, 0, 109)


@pytest.mark.parametrize("name", ["model.pt", "weights.PTH", "data.pkl", "x/y.Pickle"])
def test_a_pickle_file_is_refused_by_name(name: str) -> None:
    with pytest.raises(ModelScanError, match=f"refused 1 pickle-format file.*: {name}$"):
        scan(_entries("model.safetensors", name), format="safetensors")


def test_many_refused_files_are_named_first_few_then_counted() -> None:
    with pytest.raises(ModelScanError) as refused:
        scan(_entries("model.safetensors", *(f"p{index}.pt" for index in range(5))))
    assert str(refused.value).endswith("p0.pt, p1.pt, p2.pt and 2 more")
    assert "refused 5" in str(refused.value)


def test_the_file_cap_is_configurable() -> None:
    entries = _entries(*(f"{index}.safetensors" for index in range(5)))
    assert scan(entries, max_files=5).files == 5
    with pytest.raises(ModelScanError, match="5 files, more than the cap of 4"):
        scan(entries, max_files=4)


def test_the_declared_format_must_be_present() -> None:
    with pytest.raises(ModelScanError, match="no .safetensors file"):
        scan(_entries("model.gguf"), format="safetensors")
    with pytest.raises(ModelScanError, match="no .gguf file"):
        scan(_entries("model.safetensors"), format="gguf")
    assert scan(_entries("Model.GGUF"), format="gguf").gguf_files == 1
    with pytest.raises(ModelScanError, match="unknown model format"):
        scan(_entries("model.onnx"), format="onnx")


def test_a_signature_right_wrong_and_without_a_key() -> None:
    digest = digest_of(_entries("model.safetensors"))
    key = b"cluster key"
    signature = signature_of(digest, key)
    assert signature == hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()
    check_signature(digest, signature, key)
    check_signature(digest, signature.upper(), key)
    check_signature(digest, None, None)  # unsigned: passes
    with pytest.raises(ModelScanError, match=f"signature does not match digest {digest[:12]}…"):
        check_signature(digest, signature_of(digest, b"another key"), key)
    with pytest.raises(ModelScanError, match="does not match"):
        check_signature(digest, "ünïcode", key)
    for missing in (None, b""):
        with pytest.raises(ModelScanError, match="signed but the cluster has no model signing key: set "
                           r"model_signing_secret \(BERTH_MODEL_SIGNING_SECRET\)"):
            check_signature(digest, signature, missing)
