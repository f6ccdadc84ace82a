"""Model fetch throughput: activities.hub (listing) + model_fetch vs a plain `snapshot_download`.

Same run, same olah mirror, same repo (SmolLM2-135M-Instruct from .state/hf-mirrors), cold target each
time, best of 3, the two alternating. Target (issue 16): fetch ≥ 0.95× plain, goal ≥ 1.0×. Prints JSON.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, emit

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from huggingface_hub import snapshot_download  # noqa: E402

from activities.hub import resolve  # noqa: E402
from activities.model_fetch import fetch  # noqa: E402
from berth.hf_mirror import MirrorConfig, MirrorProcess  # noqa: E402

MIRRORS = Path(os.environ.get("BERTH_HF_MIRRORS", REPO / ".state" / "hf-mirrors"))
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
ROUNDS = 3


def plain(endpoint: str, target: Path) -> float:
    started = time.monotonic()
    snapshot_download(MODEL, endpoint=endpoint, local_dir=target, token=False)
    return time.monotonic() - started


def ours(endpoint: str, target: Path, workers: int) -> tuple[float, int, bool]:
    started = time.monotonic()
    plan = resolve(endpoint, MODEL, "main", None)
    result = asyncio.run(fetch(plan, endpoint, MODEL, target, None, max_workers=workers))
    return time.monotonic() - started, result.bytes_transferred, result.verified


def main() -> None:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    work = Path(tempfile.mkdtemp(prefix="berth-bench-fetch-"))
    mirror = MirrorProcess(MirrorConfig(mirrors_dir=MIRRORS, state_dir=work / "olah", startup_timeout_seconds=60))
    endpoint = mirror.start()
    plain_runs: list[float] = []
    fetch_runs: list[float] = []
    try:
        plain(endpoint, work / "warm-up")  # olah reads its git objects cold the first time
        for index in range(ROUNDS):
            # Alternate which goes first: on shared cores a run is noisy, the order should not be.
            for which in ("plain", "fetch") if index % 2 == 0 else ("fetch", "plain"):
                target = work / f"{which}-{index}"
                if which == "plain":
                    plain_runs.append(plain(endpoint, target))
                else:
                    seconds, size, verified = ours(endpoint, target, workers)
                    assert verified
                    fetch_runs.append(seconds)
                shutil.rmtree(target)
    finally:
        mirror.stop()
        shutil.rmtree(work, ignore_errors=True)
    plain_best, fetch_best = min(plain_runs), min(fetch_runs)
    emit("model_fetch", {
        "bytes": size, "max_workers": workers,
        "snapshot_download_mb_s": size / plain_best / 1e6, "fetch_mb_s": size / fetch_best / 1e6,
        "ratio": plain_best / fetch_best, "target_ratio": 0.95, "goal_ratio": 1.0,
        "meets_target": plain_best / fetch_best >= 0.95,
        "snapshot_download_runs_s": plain_runs, "fetch_runs_s": fetch_runs,
    })


if __name__ == "__main__":
    main()
