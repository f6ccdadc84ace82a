"""Engine simulator: a test double and dry-run engine that answers like `vllm serve`."""
