"""A throwaway PostgreSQL for the store's tests (tests/server/conftest.py) and the benchmarks (bench/operations.py):
Debian's server binaries (`make postgres` installs them), one instance in a tmp dir (initdb, pg_ctl, a free loopback
port, TCP only), one fresh database per caller. Run as root, the binaries run as the `postgres` user (initdb refuses
root). Here, not under tests/, because nothing imports tests (the benchmarks included)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from stack.driver import free_port_base

MISSING = ("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: `make postgres` installs Debian's "
           "postgresql (or deselect these tests with -m 'not postgres').")


def server_binaries() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise RuntimeError(MISSING)
    return Path(versions[-1]).parent


@dataclass
class PostgresInstance:
    root: Path
    port: int
    bin_dir: Path
    user: str = "berth"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *argv: str) -> None:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            log = self.root / "postgres.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}): {result.stdout}{result.stderr}{tail}")

    def start(self) -> PostgresInstance:
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories='' "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "postgres.log"), "-o", options, "-w",
                  "-t", "60", "start")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self) -> str:
        """A new, empty database: its SQLAlchemy URL (psycopg 3)."""
        import psycopg  # the `postgres` extra's driver: imported only where a database is made

        name = f"berth_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{name}"


def start_instance(tmp_dir: Path) -> PostgresInstance:
    """An instance under `tmp_dir`; as root, under a directory of the `postgres` user's own, since pytest's
    tmp dirs are private to root."""
    bin_dir = server_binaries()
    if os.geteuid() == 0:
        root = Path(tempfile.mkdtemp(prefix="berth-postgres-"))
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        (tmp_dir / "postgres-instance").write_text(str(root))  # where it is, for whoever reads the tmp dir
    else:
        root = tmp_dir
    return PostgresInstance(root=root, port=free_port_base(), bin_dir=bin_dir).start()


def remove_instance(instance: PostgresInstance, tmp_dir: Path) -> None:
    instance.stop()
    if instance.root != tmp_dir:
        shutil.rmtree(instance.root, ignore_errors=True)
