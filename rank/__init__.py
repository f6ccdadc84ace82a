"""Code that runs inside a rank's engine process (vLLM's interpreter, not Berth's).

vLLM loads it with `--middleware berth_rank_guard.CopyGuard`, from this folder put first on the rank's
PYTHONPATH (activities/vllm_command.py). It imports the standard library only: the engine's virtualenv
has no Berth in it, and none of Berth's code belongs in a process a user's model and flags influence.
"""

from pathlib import Path

# The folder a rank's PYTHONPATH starts with, so that `berth_rank_guard` imports by its bare name.
GUARD_DIR = Path(__file__).resolve().parent
GUARD_MIDDLEWARE = "berth_rank_guard.CopyGuard"
