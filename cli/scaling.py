"""`berth workflow explain-scaling WF`: what the autoscaler last measured for a pool, what it decided, and why."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cli.common import Format, OutputOption, answer, console, table

if TYPE_CHECKING:
    from berth.contracts.rollouts import ScalingExplanation

# The policy's thresholds as the catalog names them (0 = that rule is off).
THRESHOLDS = (("min_replicas", "MinReplicas"), ("max_replicas", "MaxReplicas"),
              ("target_requests_per_s", "TargetRequestRate"), ("target_concurrency", "TargetConcurrency"),
              ("scale_down_delay_s", "ScaleDownDelay"),
              ("scale_to_zero_after_s", "ScaleToZeroAfter"), ("scale_out_queue", "ScaleOutQueue"),
              ("scale_out_s", "ScaleOutSeconds"), ("scale_out_ttft_ms", "ScaleOutTtftMs"),
              ("scale_in_queue", "ScaleInQueue"), ("scale_in_s", "ScaleInSeconds"))


def explain_scaling(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
    """The autoscaler's last decision for a pool, its reason, the signal it measured and the thresholds."""
    explanation = answer(output, lambda api: api.explain_scaling(workflow_id))
    if explanation is not None:
        show(explanation)


def _figure(value: float | None, unit: str) -> str:
    return "no fresh metrics" if value is None else f"{value:.1f}{unit}"


def show(explanation: ScalingExplanation) -> None:
    signal = explanation.signal
    at = time.strftime("%H:%M:%S", time.localtime(explanation.at))
    console.print(f"[bold]{explanation.workflow_id}[/]: {explanation.decision} → {explanation.desired} copies "
                  f"(at {at})", highlight=False)
    console.print(f"  Reason: {explanation.reason}", highlight=False)
    console.print(f"  In flight per copy: {_figure(signal.in_flight, '')}; queue per copy: "
                  f"{_figure(signal.queue_depth, '')}; mean TTFT: {_figure(signal.ttft_ms, ' ms')}; "
                  f"rate: {signal.rate_rps:.2f} req/s", highlight=False)
    stale = ", ".join(signal.stale_copies) or "none"
    console.print(f"  Ready copies: {signal.ready_copies}, with fresh metrics: {signal.fresh_copies}; "
                  f"stale or silent: {stale}", highlight=False)
    rows = [{"name": name, "value": explanation.policy[key]} for key, name in THRESHOLDS if key in explanation.policy]
    if rows:
        table(rows, [("name", "THRESHOLD"), ("value", "VALUE")], title="Policy (0 = off)")
