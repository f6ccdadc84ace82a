"""A real one-machine Slurm cluster for the Slurm backend's tests and benchmark (issue 35): Debian's slurmctld, two
slurmd (two Slurm nodes on this host, each on its own loopback port) and munged with its own key and socket, all
configured in a tmp dir and stopped after. GPUs are GRES backed by character devices made in the tmp dir (the same
device as /dev/null: Slurm only checks that each exists). `make slurm` installs the packages. Here, not under
tests/, because nothing imports tests (bench/slurm_start.py included); the tests' session fixture is
tests/slurm_cluster.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from berth.processes import free_port
from berth.settings import SlurmSettings
from stack.slurm_accounting import SlurmAccounting

MISSING = ("Slurm is not installed: `make slurm` installs Debian's slurm-wlm, slurmdbd, mariadb-server and munge (or "
           "deselect -m 'not slurm').")
NODES = ("n1", "n2")
CLUSTER = "berthtest"


@dataclass
class SlurmCluster:
    root: Path
    gpus_per_node: int = 2
    cpus_per_node: int = 4
    controller_port: int = field(default_factory=free_port)
    node_ports: tuple[int, ...] = field(default_factory=lambda: (free_port(), free_port()))
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    accounting: SlurmAccounting = field(init=False)

    def __post_init__(self) -> None:
        self.accounting = SlurmAccounting(self.root)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def environment(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(self.conf), "LANG": "C.UTF-8"}

    def settings(self, **values: object) -> SlurmSettings:
        return SlurmSettings(conf=str(self.conf), partition="gpu", shared_dir=str(self.root / "shared"),
                             command_timeout_s=30, **values)  # type: ignore[arg-type]

    def command(self, *argv: str) -> str:
        return subprocess.run(argv, env=self.environment, capture_output=True, text=True, timeout=30,
                              check=True).stdout

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        if any(shutil.which(c) is None for c in ("munged", "slurmctld", "slurmd", "sbatch")) \
                or not SlurmAccounting.installed():
            raise RuntimeError(MISSING)
        for name in ("munge", "state", "spool", "log", "dev", "shared"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._devices()
        self._write_conf()
        munge = self.root / "munge"
        self._spawn(["munged", "-F", "-f", f"--socket={munge / 'socket'}", f"--key-file={key}",
                     f"--log-file={self.root / 'log' / 'munged.log'}", f"--pid-file={munge / 'pid'}",
                     f"--seed-file={munge / 'seed'}"], "munged")
        self._wait(lambda: (munge / "socket").exists(), timeout_s, "munged's socket")
        database = self.accounting.start_database(self._spawn)
        self._wait(database.exists, timeout_s, "MariaDB's socket")
        self.accounting.start_dbd(self._spawn, munge / "socket")
        self._wait(self._cluster_registered, timeout_s, "slurmdbd answering, the cluster registered")
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        for node in NODES:
            self._spawn(["slurmd", "-D", "-f", str(self.conf), "-N", node], f"slurmd-{node}")
        self._wait(self._all_idle, timeout_s, "both Slurm nodes idle")
        # slurmctld reports to slurmdbd once it registered there; a job started before that has its record made
        # from its steps' (named "allocation", on the first node only).
        self._wait(self._controller_registered, timeout_s, "slurmctld registered with slurmdbd")
        return self

    def _devices(self) -> None:
        for index in range(len(NODES) * self.gpus_per_node):
            device = self.root / "dev" / f"gpu{index}"
            if not device.exists():
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/nullN are

    def _write_conf(self) -> None:
        root, host = self.root, socket.gethostname()
        nodes = [f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={self.cpus_per_node} "
                 f"RealMemory=2000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN"
                 for n, p in zip(NODES, self.node_ports, strict=True)]
        self.conf.write_text("\n".join((
            f"ClusterName={CLUSTER}", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={self.controller_port}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={root / 'munge' / 'socket'}",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'state' / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "GresTypes=gpu", "MpiDefault=none",
            # Two Slurm nodes of 4 CPUs each on a 2-core CI machine: the configured counts stand (no INVAL).
            "SlurmdParameters=config_overrides",
            # A site that refuses what a partition can never run at submission (Berth then says Slurm's words).
            "EnforcePartLimits=ALL",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={root / 'log' / 'jobcomp.txt'}",
            *self.accounting.slurm_conf_lines(root / 'munge' / 'socket'),
            "ReturnToService=2", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=2", "MinJobAge=600",
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1", *nodes,
            f"PartitionName=gpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            # A second partition over the same nodes: what a workflow's SlurmPartition may pick.
            f"PartitionName=long Nodes={','.join(NODES)} MaxTime=2-00:00:00 State=UP", "")))
        (root / "gres.conf").write_text("".join(
            f"NodeName={node} Name=gpu File={root / 'dev' / f'gpu{i * self.gpus_per_node + g}'}\n"
            for i, node in enumerate(NODES) for g in range(self.gpus_per_node)))

    def _spawn(self, argv: list[str], name: str) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        self.processes.append(subprocess.Popen(argv, env=self.environment, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def _cluster_registered(self) -> bool:
        """Whether slurmdbd answers and knows this cluster (added on the first answer; slurmctld then reports to it)."""
        try:
            listed = self.command("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster")
        except (subprocess.SubprocessError, OSError):
            return False
        if CLUSTER in listed.split():
            return True
        subprocess.run(["sacctmgr", "-i", "add", "cluster", CLUSTER], env=self.environment, capture_output=True,
                       timeout=30, check=False)
        return False

    def _controller_registered(self) -> bool:
        try:
            shown = self.command("sacctmgr", "-n", "-P", "show", "cluster", CLUSTER, "format=controlhost,controlport")
        except (subprocess.SubprocessError, OSError):
            return False
        return shown.strip() not in ("", "|", "|0")

    def _all_idle(self) -> bool:
        try:
            lines = self.command("sinfo", "-h", "-N", "-o", "%N %t").splitlines()
        except (subprocess.SubprocessError, OSError):
            return False
        states = dict(line.split() for line in lines if len(line.split()) == 2)  # a node once per partition
        return sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}

    def _wait(self, condition: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():  # type: ignore[operator]
            dead = [p.args for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in (self.root / "log").glob("*"))
                self.stop()
                raise RuntimeError(f"Slurm cluster: no {what} within {timeout_s:g} s (exited: {dead})\n{logs}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.processes:
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.environment, capture_output=True,
                           timeout=30, check=False)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.processes.clear()
