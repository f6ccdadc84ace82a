"""FrontSupervisor: place, start and keep an endpoint's front process (its LiteLLM proxy, or a gateway or
OpenCode server), restarting it with back-off; run by FrontWorkflow, and inline by histories from before it."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Protocol, TypedDict

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import EndpointFront, FrontPort, FrontPortRequest
    from berth.kinds import ProcessKind, facts
    from berth.settings import CONTROL_TASK_QUEUE, node_task_queue
    from workflows import activity_stubs as stubs
    from workflows.front_restart import FIRST_BACKOFF_S, RESTART_AT_ONCE_S, FrontVerdict, after_exit
    from workflows.payloads import FrontExit, FrontReport, FrontRun, LiveCheck, PoolInput
    from workflows.supervised import MAX_ADOPTIONS, agent_went_silent, not_adopted, start_supervised

SHORT = timedelta(seconds=60)
CONTROL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
PROXY_SERVICE = ProcessKind.LITELLM.value  # the front of a Proxy=true pool
FATAL_SERVICE_ERRORS = ("EndpointUnreachable", "ServiceConfig", "SecretError", "ServiceSpawnFailed")


class FrontHost(Protocol):
    """Who hears what the front process does: the pool's own state (inline) or the pool's signals (child)."""

    def stopping(self) -> bool: ...

    async def report(self, report: FrontReport) -> None: ...


class FrontSupervisor:
    def __init__(self, input: PoolInput, host: FrontHost) -> None:
        self.input = input
        self.host = host
        self.failed: str | None = None  # a fatal configuration error: restarting cannot help

    async def run(self) -> None:
        """Once live, the endpoint routes to it; if it exits, the endpoint stops routing to it and it is
        started again with back-off; stopped with its host. The master key travels as a literal only
        inside the (encrypted) history, or as an ApiKeySecret reference resolved on the node."""
        input = self.input
        owner = f"{input.workflow_id}.{front_name(input)}"
        # A killed LiteLLM is started again at once (issue 33: serving again within 3 s), not after a 1 s back-off;
        # histories recorded before that wait 1 s first, and replay so.
        first = RESTART_AT_ONCE_S if workflow.patched("front-restart-at-once") else FIRST_BACKOFF_S
        backoff = first
        try:
            while not self.host.stopping():
                port: FrontPort = await workflow.execute_activity(
                    stubs.reserve_service_port, FrontPortRequest(workflow_id=input.workflow_id, owner=owner),
                    task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                    retry_policy=CONTROL_RETRY,
                )
                run = front_run(input, port)
                started = workflow.now()
                exit_message = await self._life(run, port)
                decided = after_exit(backoff, (workflow.now() - started).total_seconds(), self.host.stopping(),
                                     self.failed is not None, first)
                backoff = decided.next_backoff_s
                if decided.verdict is FrontVerdict.STOP:
                    return
                if decided.verdict is FrontVerdict.FAIL:
                    await self.host.report(FrontReport(kind="service_failed", message=exit_message,
                                                       last_error=exit_message, failed=True))
                    return
                when = f"in {decided.wait_s:.0f} s" if decided.wait_s else "now"
                await self.host.report(FrontReport(
                    kind="service_exited", message=f"{exit_message}; restarting it {when}",
                    last_error=exit_message, restarted=True))
                if decided.wait_s:
                    with contextlib.suppress(asyncio.TimeoutError):  # the back-off ran out: start it again
                        await workflow.wait_condition(self.host.stopping, timeout=timedelta(seconds=decided.wait_s))
        finally:
            await workflow.execute_activity(
                stubs.release_placement, owner, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                retry_policy=CONTROL_RETRY,
            )

    async def _life(self, run: FrontRun, port: FrontPort) -> str:
        """One run of the process; returns why it ended (empty when stopped on request). The process
        outlives its node agent: when the agent goes silent, a restarted one is asked to adopt it, and
        the endpoint keeps routing to it meanwhile."""
        timings = self.input.timings
        process = start_supervised(stubs.run_service, run, port.node_id, timings, adopting=False)
        live = workflow.start_activity(
            stubs.wait_live, live_check(run), task_queue=node_task_queue(port.node_id),
            start_to_close_timeout=timedelta(seconds=240),
            heartbeat_timeout=timedelta(seconds=timings.rank_heartbeat_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["NotReady"]),
        )
        routed = False
        adoptions = 0

        def settled() -> bool:  # the process ended, the probe answered (once), or the host stops
            return process.done() or (live.done() and not routed) or self.host.stopping()

        try:
            while True:
                await workflow.wait_condition(settled)
                if self.host.stopping():
                    break
                if not process.done():  # the liveness probe answered first
                    if live.exception() is not None:  # up but never live: stop it, and start it again
                        process.cancel()
                        await workflow.wait([process])
                        return f"service {run.name} on {port.node_id} never became live: {live.exception()}"
                    await self._route(run.url)
                    routed = True
                    await self.host.report(FrontReport(
                        kind="service_ready", message=f"{run.name} live at {run.url} on {port.node_id} after "
                        f"{live.result():.1f} s; the endpoint routes to it"))
                    continue
                if not agent_went_silent(process.exception()) or adoptions >= MAX_ADOPTIONS:
                    break
                # Histories recorded before services could be adopted restarted the service here.
                if not workflow.patched("service-adoption"):
                    break
                adoptions += 1
                await self.host.report(FrontReport(
                    kind="service_unresponsive",
                    message=f"node agent of {port.node_id} stopped answering for {run.name}; the service keeps "
                    f"running and a restarted agent has {timings.rank_adopt_window_s:.0f} s to adopt it"))
                process = start_supervised(stubs.adopt_service, run, port.node_id, timings, adopting=True)
        finally:
            if routed:
                await self._route(None)
            for task in (live, process):
                if not task.done():
                    task.cancel()
            await workflow.wait([live, process])
        if self.host.stopping():
            return ""
        return self._why_ended(process, run, port)

    def _why_ended(self, process: workflow.ActivityHandle[FrontExit], run: FrontRun, port: FrontPort) -> str:
        timings = self.input.timings
        try:
            result = process.result()
        except ActivityError as error:
            cause = error.cause
            if not_adopted(error):
                return (f"service {run.name} on {port.node_id} was lost (its node agent stopped answering): "
                        f"no node agent on {port.node_id} adopted it within {timings.rank_adopt_window_s:.0f} s")
            message = f"service {run.name} on {port.node_id} failed: " + (
                cause.message if isinstance(cause, ApplicationError) else str(cause or error))
            if isinstance(cause, ApplicationError) and cause.non_retryable and cause.type in FATAL_SERVICE_ERRORS:
                self.failed = message  # restarting cannot help: bad settings, say which and why
            return message
        return result.describe() + (f"; last lines of its log:\n{result.log_tail}" if result.log_tail else "")

    async def _route(self, url: str | None) -> None:
        await workflow.execute_activity(
            stubs.set_endpoint_service,
            EndpointFront(endpoint_id=self.input.endpoint_id, service=front_name(self.input), url=url),
            task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT, retry_policy=CONTROL_RETRY,
        )
        await self.host.report(FrontReport(ready=url is not None))


class _FrontCommon(TypedDict):
    """The FrontRun fields a service entry's front and a pool's LiteLLM proxy share."""

    workflow_id: str
    endpoint_id: str
    owner: str
    address: str
    port: int
    api_key_secret: str | None


def front_run(input: PoolInput, port: FrontPort) -> FrontRun:
    definition = input.definition
    common: _FrontCommon = {"workflow_id": input.workflow_id, "endpoint_id": input.endpoint_id,
                            "owner": input.owner.user, "address": port.address, "port": port.port,
                            "api_key_secret": definition.api_key_secret}
    if definition.service is not None and definition.replica is None:
        options = {k: str(v) for k, v in definition.service.options.items() if v is not None and k != "password"}
        if definition.service.volume:
            options["volume"] = definition.service.volume  # OpenCode's workspace outlives the workflow
        # The gateway's master key when generated (MasterKeySecret is resolved on the node instead).
        master_key = definition.api_key if facts(definition.service.kind).generates_key and \
            not definition.api_key_secret else None
        return FrontRun(name=definition.service.kind, kind=definition.service.kind, options=options,
                          password=str(definition.service.options.get("password") or "") or None,
                          endpoint_url=input.endpoint_url, api_key=master_key, **common)
    replica = definition.replica
    assert replica is not None
    return FrontRun(
        name=PROXY_SERVICE, kind=PROXY_SERVICE,
        options={"model_name": definition.model_id or replica.engine.served_model_name,
                 "served_model_name": replica.engine.served_model_name},
        api_key=None if definition.api_key_secret else definition.api_key, **common,
    )


def fronted(input: PoolInput) -> bool:
    """A replica pool with `Proxy=true`: its endpoint is a LiteLLM proxy in front of the pool."""
    return input.definition.front_kind is ProcessKind.LITELLM


def front_name(input: PoolInput) -> str:
    kind = input.definition.front_kind
    return kind.value if kind is not None else PROXY_SERVICE


def live_check(run: FrontRun) -> LiveCheck:
    probe = facts(run.kind).probe
    return LiveCheck(url=run.url, path=probe.path, unauthorized_is_live=probe.unauthorized_is_live)
