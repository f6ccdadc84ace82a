"""Scanning: the policy a model's manifest must pass before it is Ready — a file count under the cap, no
pickle-format weights (loading one runs code), at least one file of the declared format — and the check
of its signature, an HMAC-SHA256 of the digest under the cluster's model signing key."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from berth.errors import UserInputError
from berth.model_digest import ManifestEntry

# Pickle formats: unpickling runs arbitrary code. A `.bin` file is not on the list: it is as often a
# tokenizer or raw tensor file as a pickle, and refusing it would refuse models that carry safetensors too.
REFUSED_SUFFIXES = (".pkl", ".pickle", ".pt", ".pth")
FORMAT_SUFFIXES = {"safetensors": ".safetensors", "gguf": ".gguf"}
DEFAULT_MAX_FILES = 10_000
_NAMED = 3  # refused files an error names before it counts the rest


class ModelScanError(UserInputError):
    """A model's bytes were refused; `str(error)` is one line saying which files and why."""


@dataclass
class ScanReport:
    files: int
    safetensors_files: int
    gguf_files: int
    bytes: int


def _names(paths: list[str]) -> str:
    named = ", ".join(paths[:_NAMED])
    return named if len(paths) <= _NAMED else f"{named} and {len(paths) - _NAMED} more"


def scan(entries: Sequence[ManifestEntry], max_files: int = DEFAULT_MAX_FILES,
         format: str = "safetensors") -> ScanReport:  # `format`: the field's name in ModelCreate
    """The report of a manifest that passes; ModelScanError naming what fails."""
    wanted = FORMAT_SUFFIXES.get(str(format))
    if wanted is None:
        raise ModelScanError(f"unknown model format {format!r}; valid: {', '.join(FORMAT_SUFFIXES)}")
    if len(entries) > max_files:
        raise ModelScanError(f"the model has {len(entries)} files, more than the cap of {max_files} "
                             "(model_max_files)")
    refused = sorted(entry.path for entry in entries if entry.path.lower().endswith(REFUSED_SUFFIXES))
    if refused:
        raise ModelScanError(f"refused {len(refused)} pickle-format file(s) ({', '.join(REFUSED_SUFFIXES)}: "
                             f"loading one runs code): {_names(refused)}")
    report = ScanReport(files=len(entries), bytes=sum(entry.size for entry in entries),
                        safetensors_files=sum(entry.path.lower().endswith(".safetensors") for entry in entries),
                        gguf_files=sum(entry.path.lower().endswith(".gguf") for entry in entries))
    found = report.safetensors_files if format == "safetensors" else report.gguf_files
    if not found:
        raise ModelScanError(f"the model declares format {format} but has no {wanted} file")
    return report


def signature_of(digest: str, key: bytes) -> str:
    """The signature of a digest: HMAC-SHA256 hex of the digest's ASCII text under `key`."""
    return hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()


def check_signature(digest: str, signature: str | None, key: bytes | None) -> None:
    """Passes an unsigned model; a signed one must match under the cluster's key, and with no key it fails
    (a signature nobody can check is never taken as good)."""
    if signature is None:
        return
    if not key:
        raise ModelScanError(f"the model with digest {digest[:12]}… is signed but the cluster has no model "
                             "signing key: set model_signing_secret (BERTH_MODEL_SIGNING_SECRET) to a Berth secret")
    expected = signature_of(digest, key)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().lower().encode("utf-8")):
        raise ModelScanError(f"signature does not match digest {digest[:12]}…: it was made under another key "
                             "or over other bytes")
