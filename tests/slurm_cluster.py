"""The session's real one-machine Slurm cluster (stack/slurm_cluster.py) for the Slurm backend's tests (issue 35):
every test that takes it is in the `slurm` xdist group, so one worker runs them all on one cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stack.slurm_cluster import SlurmCluster

__all__ = ["SLURM_GROUP", "SlurmCluster", "slurm_cluster"]

SLURM_GROUP = "slurm"  # every test that takes the session's cluster: one worker runs them all, on one cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One cluster for the session's Slurm tests (they share the `slurm` xdist group); each test's jobs are its
    own, by name, and each test cancels what it started."""
    running = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield running
    running.stop()
