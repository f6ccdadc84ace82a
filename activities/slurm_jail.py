"""The ranks of a copy placed as a Slurm job start as the rank user too (issue 35, as on Berth's own nodes since
issue 29): a job runs as the user who submitted it, so a control worker running as root would otherwise run code a
user influences (their model's files, their engine flags) as root, next to the cluster's keys.

When the worker is root (and BERTH_RANK_USER is not `none`), `copy.json` carries rank/jail.py's plan, made here
exactly as activities/rank_jail.py makes it for a node agent's ranks: the worker's state dir hidden, the engine's
virtualenv, Python and PYTHONPATH and the model read-only, and two directories of its owner's own rank uid
(activities/rank_identities.py) writable — the job's `run/` (the engine's home and working directory) and that
user's engine cache on the shared filesystem. The launcher (rank/slurm_rank.py), still root, reads the copy's key,
then execs the engine through the jail. The job directory itself stays root's (0700): a rank user who could write it
could rewrite the next launcher's `copy.json`.

A worker that is not root cannot change users: its jobs' ranks run as the worker's own user, as a site without
root runs Berth (docs/slurm.md), and it says so once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from activities.rank_identities import RankIdentities, user_environment
from activities.rank_jail import engine_paths, give, give_top, model_paths, plan

RUN_DIR = "run"  # in the job directory: the engine's home and working directory, the rank user's
ENGINE_CACHE = "engine-cache"  # in the shared directory: vLLM's cache, one for every job, as one per node


def jail_plan(users: RankIdentities, owner: str, workflow_id: str, job_dir: Path, shared_dir: Path,
              argvs: Mapping[str, Sequence[str]], environment: dict[str, str], model_dir: str,
              secret: Iterable[Path]) -> dict[str, object]:
    """rank/jail.py's plan for every rank of the job, as its owner's own uid, with `environment` given that
    user's home and engine cache. Blocking file work (it makes and gives those directories, and walks the model's):
    run it in a thread."""
    user = users.for_ranks(owner, workflow_id)
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_dir, cache = job_dir / RUN_DIR, shared_dir / ENGINE_CACHE / str(user.uid)
    give(user, [run_dir])
    give_top(user, cache)
    environment["HOME"] = str(run_dir)  # ~/.cache, ~/.config of a user with no home
    user_environment(user, environment)
    environment.setdefault("VLLM_CACHE_ROOT", str(cache))
    read_only: set[Path] = set(model_paths(Path(model_dir)))
    for argv in argvs.values():
        read_only |= engine_paths(argv, environment)
    return plan(user, read_only, [run_dir, cache], secret)
