"""Chaos soak (issue 12): a simulated 4-node stack with a 2-node copy, a 3-copy pool and a Proxy=true
model under steady non-streamed and streamed load, while a random Berth process (node agent, control
worker, API, endpoint proxy, LiteLLM, a rank, Temporal) is SIGKILLed every 20–40 s and the stack
restarts it itself. Invariants checked each second; one JSON object printed (and written to
bench/results/chaos_soak.json). Goals: 0 copies lost without an event, 0 GPUs reserved twice, 0 orphans
after `berth down`, 0 workflows failed, non-streamed success ≥ 99.9 %, 0 streams broken without an
error event. The target figure is the 30-minute run (the default); `--minutes` shortens it."""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from bench.chaos.soak import SoakOptions, run_soak, verdicts
from bench.common import emit

SUCCESS_GOAL = 0.999


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=None, help="reproduce a run's kill sequence")
    parser.add_argument("--interval", default="20,40", help="seconds between kills: MIN,MAX")
    parser.add_argument("--rate", type=float, default=3.0, help="requests per second, all endpoints together")
    args = parser.parse_args()
    low, high = (float(v) for v in args.interval.split(","))
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    options = SoakOptions(minutes=args.minutes, seed=seed, interval_s=(low, high), rate_per_s=args.rate)
    state = Path(tempfile.mkdtemp(prefix="berth-bench-chaos-")) / "state"
    result = run_soak(options, state)
    result["goals_met"] = verdicts(result, SUCCESS_GOAL)
    result["success_goal"] = SUCCESS_GOAL
    emit("chaos_soak", result)


if __name__ == "__main__":
    main()
