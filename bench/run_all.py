"""`make bench`: run every benchmark in turn (each prints JSON and writes bench/results/NAME.json)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = ["start_to_ready", "proxy_overhead", "placement", "rank_death", "real_start", "routing_quality",
              "wake_from_zero", "gateway_overhead", "rollout_under_load"]
HELPERS = ["run_all", "common", "proxy_limits", "shared_prefix_load", "__init__"]  # modules the benchmarks import
AGAIN = {"routing_quality": ["--load", "shared-prefix"]}  # a second run with these arguments


def main() -> None:
    failed = []
    names = BENCHMARKS + [p.stem for p in sorted((REPO / "bench").glob("*.py")) if p.stem not in BENCHMARKS + HELPERS]
    for name, arguments in [(name, []) for name in names] + list(AGAIN.items()):
        print(f"== bench/{name}.py {' '.join(arguments)}", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{name}", *arguments], cwd=REPO).returncode != 0:
            failed.append(" ".join([name, *arguments]))
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
