"""The chaos soak shared by `bench/chaos_soak.py` (30 minutes) and `tests/e2e/test_chaos_smoke.py` (every
kind killed once, then until the stack has recovered): steady load (load.py), a process killer (monkey.py),
invariant checkers (invariants.py), and the run that ties them to a simulated 4-node stack (soak.py)."""
