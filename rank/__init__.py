"""Code that runs in a rank's process: the copy guard inside the engine (vLLM's interpreter, not Berth's), and
the jail the process starts in (`jail.py`: as the rank user, in its own mount namespace, before it execs the
engine; run by the node agent's Python as a script).

vLLM loads the guard with `--middleware berth_rank_guard.CopyGuard`, from this folder put first on the rank's
PYTHONPATH (activities/vllm_command.py). Both import the standard library only: the engine's virtualenv
has no Berth in it, and none of Berth's code belongs in a process a user's model and flags influence.
"""

from pathlib import Path

# The folder a rank's PYTHONPATH starts with, so that `berth_rank_guard` imports by its bare name.
GUARD_DIR = Path(__file__).resolve().parent
GUARD_MIDDLEWARE = "berth_rank_guard.CopyGuard"
