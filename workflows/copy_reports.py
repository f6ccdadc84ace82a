"""How a copy's workflow tells its pool what it does (`copy_state`, `copy_event`, `copy_finished` signals), in
order, from a task of its own: shared by CopyWorkflow (Berth's own nodes) and SlurmCopyWorkflow (a Slurm job).

The run never awaits a signal itself: a cancel that reaches the copy in the workflow task that resolves a signal
it awaits is dropped by the SDK (temporalio/sdk-python #620), and the copy would then never stop."""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.payloads import CopyInfo, CopyResult, Event

Report = tuple[str, CopyInfo | Event | CopyResult]


class ParentReports:
    """The reports on their way to the pool, sent one after another by one sender task."""

    def __init__(self, parent_workflow_id: str) -> None:
        self.parent_workflow_id = parent_workflow_id
        self._outbox: list[Report] = []
        self._sender: asyncio.Task[None] | None = None

    def send(self, reports: list[Report]) -> None:
        """Queue reports for the sender task."""
        self._outbox.extend(reports)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_outbox())

    async def _send_outbox(self) -> None:
        parent = workflow.get_external_workflow_handle(self.parent_workflow_id)
        while self._outbox:
            name, argument = self._outbox.pop(0)
            try:
                await parent.signal(name, argument)
            except FailureError:  # the pool is gone (terminated): nobody left to tell
                self._outbox.clear()

    async def end(self, result: CopyResult) -> CopyResult:
        """The copy's last word, which a pool that continued as new since starting it waits for."""
        self.send([("copy_finished", result)])
        with contextlib.suppress(asyncio.CancelledError):  # already stopped: a late cancel changes nothing
            await workflow.wait_condition(lambda: not self._outbox and (self._sender is None or self._sender.done()))
        return result
