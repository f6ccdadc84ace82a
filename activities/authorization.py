"""InputAuthority: the control worker's check, before a workflow acts, that the Berth API started it.

An activity rather than code in the workflow: the verification key then lives in the worker's memory, not
in the sandbox or a history, and the history records only the verdict, so a replay never checks again
(a grant that has since expired does not fail a replay)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from berth.errors import AuthenticationError
from berth.security import WORKFLOW_INPUT_AUDIENCE, TokenVerifier
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import CopyInput, FrontInput, PoolInput

UNAUTHORIZED = "UnauthorizedInput"
SERVICE_WORKFLOW = "ServiceWorkflow"


def _refuse(why: str) -> ApplicationError:
    return ApplicationError(f"Refused to run: {why}. Start workflows through the Berth API "
                            "(`berth workflow catalog start`).", type=UNAUTHORIZED, non_retryable=True)


class InputAuthority:
    """Checks grants with the API's public key and copies' parents with the Temporal server's own record."""

    def __init__(self, verifier: TokenVerifier, task_queue: str) -> None:
        self._verifier = verifier
        self._task_queue = task_queue

    @implements(stubs.verify_service_input)
    async def verify_service_input(self, input: PoolInput) -> None:
        """The grant must be the API's signature over exactly this input, for exactly this workflow ID."""
        if not input.grant:
            raise _refuse("the workflow input carries no signature from the Berth API")
        try:
            claims = self._verifier.verify(input.grant, WORKFLOW_INPUT_AUDIENCE)
        except AuthenticationError as error:
            raise _refuse(f"the workflow input's signature is not the Berth API's ({error})") from None
        workflow_id = activity.info().workflow_id
        if workflow_id is None or claims.get("typ") != "workflow-input" or claims.get("wid") != workflow_id \
                or input.workflow_id != workflow_id:
            raise _refuse("the signed input was issued for another workflow")
        if claims.get("digest") != input.digest() or claims.get("sub") != input.owner.user:
            raise _refuse("the workflow input was changed after the Berth API signed it")

    @implements(stubs.verify_copy_parent)
    async def verify_copy_parent(self, input: CopyInput) -> None:
        """A copy runs only as the child of a PoolWorkflow on this worker's queue (which checked its own
        grant): the parent is read from the Temporal server's record, not from the input."""
        info = activity.info()
        if info.workflow_id is None:
            raise _refuse("a replica copy's check runs only inside its workflow")
        client = activity.client()
        copy = await client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id).describe()
        parent_id, parent_run = copy.parent_id, copy.parent_run_id
        if parent_id is None or parent_id != input.parent_workflow_id or parent_id != input.workflow_id \
                or not input.copy_id.startswith(f"{parent_id}.copy-"):
            raise _refuse("a replica copy runs only as the child of the service workflow it names")
        parent = await client.get_workflow_handle(parent_id, run_id=parent_run).describe()
        if parent.workflow_type != SERVICE_WORKFLOW or parent.task_queue != self._task_queue:
            raise _refuse("a replica copy's parent is not a Berth service workflow")

    @implements(stubs.verify_front_parent)
    async def verify_front_parent(self, input: FrontInput) -> None:
        """A front process runs only as the child of the PoolWorkflow whose signed input it carries."""
        info = activity.info()
        if info.workflow_id is None:
            raise _refuse("a front process's check runs only inside its workflow")
        client = activity.client()
        front = await client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id).describe()
        parent_id = front.parent_id
        if parent_id is None or parent_id != input.parent_workflow_id or parent_id != input.service.workflow_id:
            raise _refuse("a front process runs only as the child of the service workflow it names")
        parent = await client.get_workflow_handle(parent_id, run_id=front.parent_run_id).describe()
        if parent.workflow_type != SERVICE_WORKFLOW or parent.task_queue != self._task_queue:
            raise _refuse("a front process's parent is not a Berth service workflow")
