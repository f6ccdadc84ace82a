"""Whether Slurm would ever run a submission's copies (issue 35), asked at submission where Slurm places them: a copy
of more nodes or GPUs than the partition has, an unknown partition or account, is refused with Slurm's own words
before any workflow starts (`sbatch --test-only`: nothing is submitted), and so is a partition, account or time
limit the values pick that the cluster does not let a workflow pick. Where Berth's node agents place copies,
server/capacity.py's check stands instead. Blocking: call it off the event loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.errors import CapacityError, UserInputError
from berth.slurm.commands import SlurmCommands
from berth.slurm.job_script import CopyJob, sbatch_options
from catalog.definition import SlurmPick, WorkflowDefinition

if TYPE_CHECKING:
    from server.context import ServerContext

CHECK_ID = "submission-check"  # the job name `--test-only` is asked under (nothing is submitted)


def refuse_slurm_pick(definition: WorkflowDefinition) -> None:
    """Where Berth's node agents place copies, a Slurm pick would be silently ignored: refuse it instead."""
    if definition.replica is not None and definition.replica.slurm is not None:
        raise UserInputError("SlurmPartition, SlurmAccount and SlurmTimeLimit apply where Slurm places copies; this "
                             "cluster places them with Berth's node agents: leave them empty.")


def check_slurm_fit(context: ServerContext, definition: WorkflowDefinition) -> None:
    replica = definition.replica
    if replica is None:
        return
    settings = context.slurm
    pick = replica.slurm or SlurmPick()
    refused = settings.pick_refusal(pick.partition, pick.account, pick.time_limit)
    if refused is not None:
        raise UserInputError(refused)
    job = CopyJob(copy_id=CHECK_ID, nodes=replica.nodes, gpus_per_node=replica.gpus_per_node,
                  job_dir=settings.shared_dir or str(context.state.root), launcher=("true",),
                  partition=pick.partition, account=pick.account, time_limit=pick.time_limit)
    refusal = SlurmCommands(settings).refusal(sbatch_options(job, settings))
    if refusal is not None:
        raise CapacityError(f"Slurm would never run a copy of {replica.nodes} node(s) with "
                            f"{replica.gpus_per_node} GPU(s) each: {refusal}")
