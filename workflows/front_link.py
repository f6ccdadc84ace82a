"""FrontLink: how a PoolWorkflow keeps its endpoint's front process — a child FrontWorkflow (which survives
the pool's continue-as-new), or inline, as histories recorded before the child existed replay it."""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.front import FrontWorkflow
    from workflows.front_supervisor import FrontSupervisor, fronted
    from workflows.payloads import FrontInput, FrontReport, Phase, PoolInput, StopRequest
    from workflows.pool_phase import update_phase
    from workflows.pool_state import PoolState

# The front process is a child workflow, copies are abandoned (not cancelled) when a run closes, and the pool
# continues as new; histories recorded before all three replay the old shape.
PATCH = "front-child-and-continue-as-new"


class _InlineHost:
    """The pool's own state hears the front process (the shape before FrontWorkflow)."""

    def __init__(self, link: FrontLink) -> None:
        self.link = link

    def stopping(self) -> bool:
        return self.link.state.front_stopping or self.link.state.stop_requested

    async def report(self, report: FrontReport) -> None:
        self.link.apply_report(report)


class FrontLink:
    def __init__(self, state: PoolState) -> None:
        self.state = state
        self._inline: FrontSupervisor | None = None  # a runtime handle (replays rebuild it), not state

    def apply_report(self, report: FrontReport) -> None:
        if report.last_error is not None:
            self.state.last_error = report.last_error
        if report.restarted:
            self.state.service_restarts += 1
        if report.ready is not None:
            self.state.service_ready = report.ready
            update_phase(self.state)
        if report.failed and report.kind:
            self.state.front_error = report.message
        if report.kind:
            self.state.event(report.kind, report.message)
        if report.ended:
            self.state.front_ended = True

    def failed(self) -> str | None:
        return self._inline.failed if self._inline is not None else self.state.front_error

    def begin(self, input: PoolInput) -> asyncio.Task[None] | None:
        """Start the front process (at once: its 6–12 s start overlaps the download and the ranks' start)."""
        self.state.new_shape = workflow.patched(PATCH)
        service_entry = input.definition.service is not None and input.definition.replica is None
        if service_entry:  # a gateway or OpenCode: its one server is the whole workflow
            self.state.phase = Phase.STARTING
            self.state.desired = 0
        elif not fronted(input):
            return None
        if not self.state.new_shape:
            self._inline = FrontSupervisor(input, _InlineHost(self))
            return asyncio.create_task(self._inline.run())
        self.state.front_id = f"{input.workflow_id}.front"
        return asyncio.create_task(self._front_child(input, self.state.front_id))

    def attach(self, front_id: str) -> asyncio.Task[None]:
        """A run continued as new: the front child started by an earlier run runs on; wait for its end."""
        self.state.front_id, self.state.front_started = front_id, True
        return asyncio.create_task(workflow.wait_condition(lambda: self.state.front_ended))

    async def _front_child(self, input: PoolInput, front_id: str) -> None:
        handle = await workflow.start_child_workflow(
            FrontWorkflow.run, FrontInput(service=input, parent_workflow_id=workflow.info().workflow_id),
            id=front_id, parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        self.state.front_started = True
        try:
            await handle
        except ChildWorkflowError as error:
            cause = error.cause
            if self.state.front_error is None:
                self.state.front_error = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
        self.state.front_ended = True

    async def stop(self, front: asyncio.Task[None] | None) -> None:
        self.state.front_stopping = True
        if front is None:
            return
        if self.state.front_id is not None and not self.state.front_ended:
            with contextlib.suppress(FailureError):  # it ended meanwhile: nothing left to stop
                await workflow.get_external_workflow_handle(self.state.front_id).signal(
                    FrontWorkflow.stop, StopRequest(by=workflow.info().workflow_id))
        await workflow.wait([front])
        if not front.cancelled() and front.exception() is not None:
            workflow.logger.warning("the endpoint's service ended with %s", front.exception())
