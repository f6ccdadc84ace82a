"""Test helpers: the stack driver (stack/driver.py, shared with the demo and the benchmarks) and what
only the tests need."""

from stack.driver import (
    REPO,
    RunningStack,
    add_node_agent,
    free_port_base,
    gpus_held,
    litellm_bin,
    opencode_bin,
    ports_free,
    process_environment,
    processes_mentioning,
    rank_record,
    service_record,
    start_gateway,
    wait_for,
)

__all__ = [
    "REPO", "SMOLLM2_QUESTION", "RunningStack", "add_node_agent", "free_port_base", "gpus_held", "litellm_bin",
    "opencode_bin", "ports_free", "process_environment", "processes_mentioning", "rank_record", "service_record",
    "start_gateway", "wait_for",
]

# The question the real SmolLM2 (a Q4_1 approximation, greedy) is asked. Plain "What is the capital of
# France?" starts "The" only 0.12 nats ahead of "L'…", so another CPU's kernels can tip it into French
# (seen in CI: "L'Étoile, la Marseillaise…"); asking for an English sentence puts "Paris" 2.1 nats ahead.
SMOLLM2_QUESTION = "What is the capital of France? Answer in one short English sentence."
