"""FrontWorkflow: keep one endpoint's front process (LiteLLM proxy, gateway, OpenCode) running beside its
pool's CopyWorkflows, telling the pool (PoolWorkflow) what it does, until the pool signals it to stop."""

from __future__ import annotations

import contextlib

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows import activity_stubs as stubs
    from workflows.authorized import refuse_signal, require_authorized
    from workflows.front_supervisor import FrontSupervisor
    from workflows.payloads import FrontInput, FrontReport, StopRequest

REPORT_SIGNAL = "front_report"  # PoolWorkflow's signal for a FrontReport


@workflow.defn
class FrontWorkflow:
    def __init__(self) -> None:
        self.input: FrontInput | None = None
        self._stop = False
        self.ready = False

    @workflow.signal
    def stop(self, request: StopRequest | None = None) -> None:
        if request is None:
            refuse_signal("stop")
            return
        self._stop = True

    @workflow.query
    def serving(self) -> bool:
        return self.ready

    def stopping(self) -> bool:
        return self._stop

    async def report(self, report: FrontReport) -> None:
        assert self.input is not None
        if report.ready is not None:
            self.ready = report.ready
        parent = workflow.get_external_workflow_handle(self.input.parent_workflow_id)
        await parent.signal(REPORT_SIGNAL, report)

    @workflow.run
    async def run(self, input: FrontInput) -> None:
        self.input = input
        await require_authorized(stubs.verify_front_parent, input)
        supervisor = FrontSupervisor(input.service, self)
        try:
            await supervisor.run()
        finally:
            # The pool waits for this last word (it may be a later run of the pool than the one that started
            # this child); a pool already gone has nobody to tell.
            with contextlib.suppress(ApplicationError):
                await self.report(FrontReport(ended=True, failed=supervisor.failed is not None))
        if supervisor.failed is not None:
            raise ApplicationError(supervisor.failed, type="ServiceFailed", non_retryable=True)
