"""What the pool asks for when it places a copy (pure: no Temporal call): the child CopyWorkflow's input,
which carries the copy's shape (engine, nodes, GPUs) for its reserve_placement request."""

from __future__ import annotations

from workflows.payloads import CopyInput, PoolInput, WeightsResult


def new_copy(input: PoolInput, model_dir: str, index: int, revision: int, weights: WeightsResult | None,
             parent_workflow_id: str) -> CopyInput:
    """Copy number `index` of `revision`, started from `input` with the weights in `model_dir`; a registered
    model's copies carry its digest."""
    replica = input.definition.replica
    assert replica is not None
    volume = input.definition.weights.volume if input.definition.weights else None
    return CopyInput(
        workflow_id=input.workflow_id, endpoint_id=input.endpoint_id,
        copy_id=f"{input.workflow_id}.copy-{index}", copy_index=index, engine=replica.engine,
        nodes=replica.nodes, gpus_per_node=replica.gpus_per_node, gpu_memory_gb=replica.gpu_memory_gb,
        model_dir=model_dir, volume=volume,
        model_digest=weights.digest if weights and input.definition.model_ref else None,
        parent_workflow_id=parent_workflow_id, timings=input.timings, revision=revision, slurm=replica.slurm,
        sites=replica.sites.placement() if replica.sites is not None else None, owner=input.owner.user,
    )
