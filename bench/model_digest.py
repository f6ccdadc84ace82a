"""Digest/verify throughput (issue 16): `berth.model_digest.manifest_of` against `sha256sum` over the same
files in one run, best of 3 each, page cache warm for both. The files are the SmolLM2-135M-Instruct weights
from the local Hugging Face mirror's working tree (copied to a temp dir without its .git, since a model
directory's digest covers every file under it), or, where the mirror is absent, a generated set of
`--size-mib` MiB (`"synthetic": true` in the JSON).

Goal: within 1.2× of sha256sum, i.e. `ratio` (digest MB/s ÷ sha256sum MB/s) ≥ 0.83. Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, emit
from berth.model_digest import default_workers, digest_of, manifest_of

MIRROR = REPO / ".state" / "hf-mirrors" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct"  # as real_start has it
ROUNDS = 3


def stage_files(target: Path, source: Path | None, size_mib: int) -> bool:
    """Fill `target` with the model's files; True when they had to be generated."""
    files = [path for path in sorted(source.iterdir()) if path.is_file()] if source and source.is_dir() else []
    if files:
        for path in files:
            shutil.copyfile(path, target / path.name)
        return False
    # A shape like a real model: one large weights file, a shard, small config files.
    remaining = size_mib << 20
    for name, share in (("model-00001-of-00002.safetensors", 0.75), ("model-00002-of-00002.safetensors", 1.0)):
        size = int(remaining * share)
        with open(target / name, "wb") as handle:
            for offset in range(0, size, 1 << 24):
                handle.write(os.urandom(min(1 << 24, size - offset)))
        remaining -= size
    (target / "config.json").write_text('{"model_type": "llama"}')
    (target / "tokenizer.json").write_bytes(os.urandom(1 << 20))
    return True


def best_seconds(action: Any, rounds: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def measure(directory: Path, workers: int, rounds: int = ROUNDS) -> dict[str, Any]:
    paths = sorted(str(path) for path in directory.iterdir())
    total = sum(os.path.getsize(path) for path in paths)
    for path in paths:  # warm the page cache for both sides
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
    entries = manifest_of(directory, max_files=10_000, workers=workers)
    sums = subprocess.run(["sha256sum", *paths], check=True, capture_output=True, text=True).stdout
    by_name = {Path(line.split("  ", 1)[1]).name: line.split("  ", 1)[0] for line in sums.splitlines()}
    assert {entry.path: entry.sha256 for entry in entries} == by_name, "manifest_of and sha256sum disagree"
    digest_s = best_seconds(lambda: manifest_of(directory, max_files=10_000, workers=workers), rounds)
    sha256sum_s = best_seconds(
        lambda: subprocess.run(["sha256sum", *paths], check=True, stdout=subprocess.DEVNULL), rounds)
    digest_mb_s, sha256sum_mb_s = total / digest_s / 1e6, total / sha256sum_s / 1e6
    return {"digest_mb_s": round(digest_mb_s, 1), "sha256sum_mb_s": round(sha256sum_mb_s, 1),
            "ratio": round(digest_mb_s / sha256sum_mb_s, 3), "files": len(paths), "bytes": total,
            "workers": workers, "digest": digest_of(entries), "goal_ratio": round(1 / 1.2, 3),
            "meets_goal": digest_mb_s / sha256sum_mb_s >= 1 / 1.2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, default=MIRROR, help="model directory (its plain files)")
    parser.add_argument("--size-mib", type=int, default=512, help="generated set's size, without --source")
    parser.add_argument("--workers", type=int, default=default_workers())
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="berth-bench-digest-") as temporary:
        directory = Path(temporary)
        synthetic = stage_files(directory, arguments.source, arguments.size_mib)
        result = measure(directory, arguments.workers)
    emit("model_digest", {"source": "generated" if synthetic else str(arguments.source), "synthetic": synthetic,
                          **result})


if __name__ == "__main__":
    main()
