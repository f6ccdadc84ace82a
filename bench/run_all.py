"""`make bench`: run every benchmark in turn (each prints JSON and writes bench/results/NAME.json)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = ["start_to_ready", "proxy_overhead", "placement", "rank_death", "real_start", "routing_quality",
              "wake_from_zero", "gateway_overhead", "rollout_under_load"]


def main() -> None:
    failed = []
    for name in BENCHMARKS + [p.stem for p in sorted((REPO / "bench").glob("*.py"))
                              if p.stem not in BENCHMARKS + ["run_all", "common", "proxy_limits", "__init__"]]:
        print(f"== bench/{name}.py", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=REPO).returncode != 0:
            failed.append(name)
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
