"""Whether Slurm would ever run a submission's copies (issue 35), asked at submission where Slurm places them: a copy
of more nodes or GPUs than the partition has, an unknown partition or account, is refused with Slurm's own words
before any workflow starts (`sbatch --test-only`: nothing is submitted). Where Berth's node agents place copies,
server/capacity.py's check stands instead. Blocking: call it off the event loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.errors import CapacityError
from berth.settings import SlurmSettings
from berth.slurm.commands import SlurmCommands
from berth.slurm.job_script import CopyJob, sbatch_options
from catalog.definition import WorkflowDefinition

if TYPE_CHECKING:
    from server.context import ServerContext

CHECK_ID = "submission-check"  # the job name `--test-only` is asked under (nothing is submitted)


def check_slurm_fit(context: ServerContext, definition: WorkflowDefinition) -> None:
    replica = definition.replica
    if replica is None:
        return
    settings = SlurmSettings.load(context.state.root)
    job = CopyJob(copy_id=CHECK_ID, nodes=replica.nodes, gpus_per_node=replica.gpus_per_node,
                  job_dir=settings.shared_dir or str(context.state.root), launcher=("true",))
    refusal = SlurmCommands(settings).refusal(sbatch_options(job, settings))
    if refusal is not None:
        raise CapacityError(f"Slurm would never run a copy of {replica.nodes} node(s) with "
                            f"{replica.gpus_per_node} GPU(s) each: {refusal}")
