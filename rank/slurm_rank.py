"""One rank of a copy placed as a Slurm job (issue 35): `srun` runs this once per node, as a script under Berth's
interpreter, with the job directory as its one argument. Standard library only, like the rest of rank/.

It names its node's address and a free port, tells the job directory (rank 0: `leader.json`, which the other ranks
wait for and Berth's worker reads to publish the copy; every rank: `rank-R.json`, so the worker can check that each
node really runs one — a job that holds N nodes but serves from one is never reported ready), then execs the engine
with the argv Berth's worker wrote into `copy.json`, those words filled in. The copy's key comes from a file only
the job's user may read, into the engine's environment: never argv. When the worker was root, the launcher builds
rank/jail.py's namespace and becomes the rank user (activities/slurm_jail.py) itself, then execs the engine in the
job's `run/` directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

TOKENS = ("@host@", "@port@", "@master_addr@", "@master_port@", "@rank@")
POLL_S = 0.1


def node_address(how: str, node: str) -> str:
    """The address other hosts reach this node at: Slurm's NodeAddr, the host name, or the Slurm node name."""
    if how == "nodename":
        return node
    if how == "hostname":
        return socket.gethostname()
    shown = subprocess.run(["scontrol", "show", "node", node, "--oneliner"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    for word in shown.split():
        if word.startswith("NodeAddr="):
            return word.split("=", 1)[1]
    raise SystemExit(f"berth rank: scontrol shows no NodeAddr for node {node}")


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def write_atomically(path: Path, record: dict[str, object]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record))
    partial.replace(path)


def wait_for_leader(job_dir: Path, timeout_s: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    path = job_dir / "leader.json"
    while not path.exists():  # the condition: rank 0 has named its address
        if time.monotonic() > deadline:
            raise SystemExit(f"berth rank: rank 0 did not name its address within {timeout_s:g} s")
        time.sleep(POLL_S)
    return dict(json.loads(path.read_text()))


def fill(argv: list[str], words: dict[str, str]) -> list[str]:
    return [words.get(word, word) for word in argv]


def main(job_dir: Path) -> None:
    started_at = time.time()  # when Slurm started this rank: the end of Slurm's part of a copy's start
    copy = json.loads((job_dir / "copy.json").read_text())
    rank = int(os.environ["SLURM_PROCID"])
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    host = node_address(copy.get("node_address", "nodeaddr"), node)
    port = free_port(host)
    if rank == 0:
        leader: dict[str, object] = {"host": host, "port": port, "master_port": free_port(host), "node": node}
        write_atomically(job_dir / "leader.json", leader)
    else:
        leader = wait_for_leader(job_dir, float(copy.get("leader_wait_s", 600)))
    write_atomically(job_dir / f"rank-{rank}.json", {"rank": rank, "node": node, "host": host, "port": port,
                                                     "pid": os.getpid(), "started_at": started_at})
    words = {"@host@": host, "@port@": str(port), "@master_addr@": str(leader["host"]),
             "@master_port@": str(leader["master_port"]), "@rank@": str(rank)}
    argv = fill(list(copy["argv"]["leader" if rank == 0 else "follower"]), words)
    environment = dict(os.environ)
    environment.update(copy.get("environment", {}))
    if copy.get("key_file"):
        environment["VLLM_API_KEY"] = (job_dir / copy["key_file"]).read_text().strip()
    if copy.get("jail") is not None:
        os.chdir(job_dir / copy["run_dir"])
        enter_jail(copy["jail"])
    sys.stdout.flush()
    os.execvpe(argv[0], argv, environment)


def enter_jail(plan: dict[str, object]) -> None:
    """Become the rank user in rank/jail.py's namespace (activities/slurm_jail.py made the plan), in this process:
    the engine is exec'd from here, one interpreter start sooner than through `python jail.py`. Only a root
    launcher can change users, so a job that was to drop to the rank user and runs as anyone else stops here."""
    if os.geteuid() != 0:
        raise SystemExit(f"berth rank: this job was to start its engine as uid {plan.get('uid')}, but its launcher "
                         f"runs as uid {os.geteuid()}, not root: the worker and the job disagree on the user")
    jail = _jail_module()
    try:
        cwd = os.getcwd()
        jail.build(plan)
        os.chdir(cwd)  # the run dir, as bound back
    except (jail.JailError, OSError, ValueError, KeyError) as error:
        print(f"berth rank jail: could not start the rank as uid {plan.get('uid')}: {error}", file=sys.stderr)
        sys.exit(jail.FAILED)


def _jail_module() -> ModuleType:
    """rank/jail.py beside this file, compiled from its source as `python jail.py` would (`python -I` puts no
    folder of Berth's on sys.path, and root reads no `__pycache__` file that someone else could have written)."""
    path = Path(__file__).with_name("jail.py")
    module = ModuleType("berth_rank_jail")
    module.__file__ = str(path)
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: slurm_rank.py JOB_DIR")
    main(Path(sys.argv[1]))
