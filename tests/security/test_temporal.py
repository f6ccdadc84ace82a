"""Issue 11, item 2: Temporal is no back door. Whoever reaches its port with a stock client (no Berth key)
cannot start a PoolWorkflow, nor stop, wake or scale someone's running one: the codec refuses what Berth
did not encrypt. Whoever also holds the data key (a node agent) still cannot start one, nor a copy: the
control worker runs only an input the API signed, and a copy only as a service workflow's child. The
embedded dev server and its UI listen on loopback only; docker-compose.yml publishes neither."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError

from berth.security import Cipher
from berth.settings import CONTROL_TASK_QUEUE, StackPorts
from berth.temporal import connect
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from tests.security.conftest import People
from tests.support import RunningStack, gpus_held, wait_for
from workflows.payloads import CopyInput, Owner, PoolInput

MODEL = "GPT-OSS 20B"
ACTED = {EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED}


def _phase(people: People, workflow_id: str) -> str:
    return str(people.api("admin", "GET", f"/v1/workflows/{workflow_id}").json().get("phase"))


@pytest.fixture(scope="module")
def bobs_workflow(people: People) -> Iterator[str]:
    result = people.cli("bob", "workflow", "catalog", "start", MODEL, "--values", "Proxy=false", check=True)
    workflow_id = str(result.stdout.strip().splitlines()[0])
    try:
        wait_for(lambda: _phase(people, workflow_id) == "ready", 240, f"{workflow_id} ready")
        yield workflow_id
    finally:
        people.cli("admin", "workflow", "stop", workflow_id)


def _address(stack: RunningStack) -> str:
    return str(stack.info["temporal_address"])


async def _keyed_client(stack: RunningStack) -> Client:
    """What a node agent holds: Temporal's address and the data key, not the API's signing key."""
    return await connect(_address(stack), Cipher.load_or_create(Path(stack.state_dir) / "keys"))


async def _history(handle: WorkflowHandle[Any, Any], until: Callable[[list[HistoryEvent]], bool]) -> list[HistoryEvent]:
    async def poll() -> list[HistoryEvent]:
        while True:
            events = list((await handle.fetch_history()).events)
            if until(events):
                return events
            await asyncio.sleep(0.2)

    return await asyncio.wait_for(poll(), 60)


def _cause(error: BaseException) -> str:
    return str(getattr(error.cause, "message", error.cause))  # type: ignore[attr-defined]


def _crafted_input(workflow_id: str) -> dict[str, Any]:
    entry = find_entry(MODEL)
    definition = render(entry, resolve_values(entry, {"Proxy": "false"}))
    return {"workflow_id": workflow_id, "endpoint_id": "ep-evil", "owner": {"user": "admin"},
            "definition": definition.model_dump(mode="json")}


def test_a_stock_client_cannot_start_a_service_workflow(security_stack: RunningStack) -> None:
    """(a) The attacker has the address only: the input is refused before the workflow runs a line."""
    workflow_id = f"evil-{uuid.uuid4().hex[:8]}"

    async def attack() -> tuple[str, list[HistoryEvent]]:
        client = await Client.connect(_address(security_stack))  # the default converter, no Berth key
        handle = await client.start_workflow("ServiceWorkflow", _crafted_input(workflow_id), id=workflow_id,
                                             task_queue=CONTROL_TASK_QUEUE)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 60)
        return _cause(failed.value), list((await handle.fetch_history()).events)

    message, events = asyncio.run(attack())
    assert "Refused a Temporal payload" in message and "not encrypted with the cluster's data key" in message
    assert not [event for event in events if event.event_type in ACTED]
    assert gpus_held(security_stack, workflow_id) == 0


def test_the_data_key_alone_starts_no_service_or_copy(people: People, bobs_workflow: str) -> None:
    """(c) Encrypted but unsigned, a signed input replayed under another ID, a copy with no service parent:
    each fails at once, non-retryable, with one clear line, having scheduled nothing but the check."""
    stack = people.stack

    async def attack() -> list[tuple[str, list[HistoryEvent]]]:
        client = await _keyed_client(stack)
        real = await client.get_workflow_handle(bobs_workflow).fetch_history()
        [signed] = await client.data_converter.decode(
            real.events[0].workflow_execution_started_event_attributes.input.payloads, [PoolInput])
        unsigned = PoolInput.model_validate(_crafted_input("x"))
        suffix = uuid.uuid4().hex[:8]
        attempts = {
            "unsigned": ("ServiceWorkflow", f"evil-{suffix}",
                         lambda wid: unsigned.model_copy(update={"workflow_id": wid})),
            "replayed": ("ServiceWorkflow", f"evil-{suffix}-replay",
                         lambda wid: signed.model_copy(update={"workflow_id": wid, "owner": Owner(user="admin")})),
            "orphan copy": ("CopyWorkflow", f"{bobs_workflow}.copy-99", lambda wid: CopyInput(
                workflow_id=bobs_workflow, endpoint_id=signed.endpoint_id, copy_id=wid, copy_index=99,
                engine=signed.definition.replica.engine, nodes=1, gpus_per_node=1,  # type: ignore[union-attr]
                gpu_memory_gb=80, model_dir="/", parent_workflow_id=bobs_workflow)),
        }
        outcomes = []
        for workflow_type, workflow_id, build in attempts.values():
            handle = await client.start_workflow(workflow_type, build(workflow_id), id=workflow_id,
                                                 task_queue=CONTROL_TASK_QUEUE)
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 60)
            outcomes.append((_cause(failed.value), list((await handle.fetch_history()).events)))
        return outcomes

    for message, events in asyncio.run(attack()):
        assert message.startswith("Refused to run: ") and "Berth API" in message, message
        scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                     if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
        assert scheduled in (["verify_service_input"], ["verify_copy_parent"]), scheduled
        assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]
    assert gpus_held(stack, "evil-") == 0
    assert _phase(people, bobs_workflow) == "ready"


def test_a_stock_client_cannot_stop_wake_or_scale_a_users_workflow(people: People, bobs_workflow: str) -> None:
    """(b) Plain signals are dropped, a bare stop is refused, a plain update is rejected; the workflow
    goes on serving and still obeys its owner. (Terminate and cancel carry no payload: only loopback or
    mTLS keeps those out.)"""
    stack = people.stack

    async def attack() -> str:
        handle = (await Client.connect(_address(stack))).get_workflow_handle(bobs_workflow)
        await handle.signal("stop")
        await handle.signal("stop", {"by": "mallory"})
        await handle.signal("wake", "mallory")
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update("scale", {"replicas": 0, "reason": "mallory"})
        keyed = (await _keyed_client(stack)).get_workflow_handle(bobs_workflow)
        # Every signal above is in the history and handled before the workflow task that follows it.
        await _history(keyed, lambda events: sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                                                 for e in events) >= 3)
        status = await keyed.query("status")
        assert status["desired_replicas"] == 1 and not any(e["kind"] == "stop_requested" for e in status["events"])
        return _cause(rejected.value)

    assert "Refused a Temporal payload" in asyncio.run(attack())
    assert _phase(people, bobs_workflow) == "ready"
    people.cli("bob", "workflow", "stop", bobs_workflow, check=True)
    wait_for(lambda: _phase(people, bobs_workflow) == "stopped", 120, f"{bobs_workflow} stopped by bob")


def test_temporal_and_its_ui_listen_on_loopback_only(security_stack: RunningStack) -> None:
    """(d) The embedded dev server: frontend, UI, HTTP API and metrics all on 127.0.0.1."""
    ports = StackPorts(int(security_stack.info["port_base"]))
    wanted = {ports.temporal, ports.temporal_ui, ports.temporal_http, ports.temporal_metrics}
    listening = [c for c in psutil.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in wanted]
    assert {c.laddr.port for c in listening} >= {ports.temporal, ports.temporal_ui}
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening
