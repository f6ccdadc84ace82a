"""Slurm's accounting for the one-machine test cluster (issue 35): a private MariaDB (its own data dir, socket and
loopback port) and slurmdbd in front of it, so `sacct` shows jobs *and their steps* as at a real site — what tells
a copy whose job holds N nodes but runs its step on one. Debian's mariadb-server and slurmdbd, installed by
`make slurm`; configured in the cluster's tmp dir and stopped with it (stack/slurm_cluster.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from berth.processes import free_port

PROGRAMS = ("mariadbd", "mariadb-install-db", "slurmdbd", "sacctmgr")
DATABASE = "slurm_acct_db"


@dataclass
class SlurmAccounting:
    root: Path  # the cluster's tmp dir: db/, slurmdbd.conf and the logs live under it
    database_port: int = field(default_factory=free_port)
    dbd_port: int = field(default_factory=free_port)

    @staticmethod
    def installed() -> bool:
        return all(shutil.which(program) for program in PROGRAMS)

    def slurm_conf_lines(self, auth_socket: Path) -> list[str]:
        """What slurm.conf says to send every job's and step's record to this slurmdbd (with munge, Slurm reads
        AccountingStoragePass as the munge socket its commands reach slurmdbd through)."""
        return ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.dbd_port}", f"AccountingStoragePass={auth_socket}",
                "JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=30"]

    def start_database(self, spawn: Callable[[list[str], str], None]) -> Path:
        """A fresh data dir and mariadbd on loopback (root with no password, reachable from this host only);
        returns the socket to wait for."""
        data = self.root / "db"
        subprocess.run(["mariadb-install-db", f"--datadir={data}", "--user=root", "--skip-test-db",
                        "--auth-root-authentication-method=normal", "--skip-name-resolve"],
                       capture_output=True, timeout=120, check=True)
        socket_path = self.root / "db.sock"
        spawn(["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={socket_path}",
               f"--port={self.database_port}", "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
               f"--pid-file={self.root / 'db.pid'}", f"--log-error={self.root / 'log' / 'mariadb.log'}",
               "--innodb-buffer-pool-size=32M"], "mariadbd")
        return socket_path

    def start_dbd(self, spawn: Callable[[list[str], str], None], auth_socket: Path) -> None:
        """slurmdbd in the foreground with its own conf (0600, as slurmdbd insists: it names the database user)."""
        conf = self.root / "slurmdbd.conf"
        conf.write_text("\n".join((
            "AuthType=auth/munge", f"AuthInfo=socket={auth_socket}", "DbdHost=localhost", f"DbdPort={self.dbd_port}",
            "SlurmUser=root", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={self.database_port}", "StorageUser=root", f"StorageLoc={DATABASE}",
            f"PidFile={self.root / 'slurmdbd.pid'}", f"LogFile={self.root / 'log' / 'slurmdbd.log'}", "")))
        conf.chmod(0o600)
        spawn(["slurmdbd", "-D"], "slurmdbd")  # it reads slurmdbd.conf beside SLURM_CONF's slurm.conf
