"""Starting a workflow's pool in Temporal: its input signed by the API (the control worker runs nothing else), under
the workflow's own ID. A submission starts a new one; a restore starts the restored ones again, or adopts one that
Temporal still runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from berth.security import Identity
from berth.settings import CONTROL_TASK_QUEUE
from catalog.definition import WorkflowDefinition
from server.submission import copy_timings
from server.views import endpoint_url
from workflows.payloads import Owner, PoolInput
from workflows.pool_workflow import PoolWorkflow

if TYPE_CHECKING:
    from server.context import ServerContext


async def start_pool(context: ServerContext, client: Client, workflow_id: str, endpoint_id: str,
                     definition: WorkflowDefinition, owner: Identity,
                     conflict: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL, revision: int = 1) -> None:
    """Start `workflow_id`'s PoolWorkflow serving `revision` (a restore: the workflow's latest); `conflict`
    USE_EXISTING: one already running under the ID is kept."""
    unsigned = PoolInput(workflow_id=workflow_id, endpoint_id=endpoint_id,
                         endpoint_url=endpoint_url(context, endpoint_id),
                         owner=Owner(user=owner.user, groups=owner.groups, org=owner.org),
                         definition=definition, timings=copy_timings(context),
                         placement_backend=context.settings.placement_backend, revision=revision)
    # The control worker runs only an input the API signed (node agents hold no signing key).
    grant = context.signing.workflow_grant(owner.user, workflow_id, unsigned.digest())
    await client.start_workflow(PoolWorkflow.run, unsigned.model_copy(update={"grant": grant}), id=workflow_id,
                                task_queue=CONTROL_TASK_QUEUE, id_conflict_policy=conflict)
