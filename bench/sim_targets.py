"""The simulated copy the proxy benchmarks measure (bench/proxy_overhead.py, bench/process_cpu.py,
bench/proxy_metrics.py, bench/litellm_overhead.py): its stack's settings, and a copy's direct and proxied targets."""

from __future__ import annotations

from bench.proxy_limits import Target
from stack.driver import RunningStack

LONG_REPLY = " ".join(["token"] * 400)
# The simulator answers at once, with a 400-token reply, and takes as many sequences as wrk sends.
STACK_ENV = {"BERTH_SIM_TOKENS_PER_SECOND": "0", "BERTH_SIM_REPLY": LONG_REPLY, "BERTH_SIM_MAX_NUM_SEQS": "256"}


def endpoint_target(stack: RunningStack) -> tuple[Target, Target]:
    """(direct to the copy, through the endpoint proxy) for a new Proxy=false GPT-OSS 20B on `stack`."""
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    copy = stack.describe(workflow_id)["replicas"][0]
    endpoint = stack.endpoint(workflow_id)
    return ((copy["url"] + "/v1/chat/completions",
             {"Authorization": f"Bearer {stack.replica_key(copy['copy_id'])}"}, True),
            (endpoint["url"] + "/v1/chat/completions",
             {"Authorization": f"Bearer {stack.token_for(endpoint['id'])}"}, stack.verify))
