"""The endpoint proxy's pipeline: its steps in the declared order (credentials before scope before limits before
the hold, forward, then retry), each in its own module, made once per proxy; a step that answers ends the request
there, and every `finish` runs once it is over, whatever ended it."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, cast

from gateway.edge.proxy_metrics import RequestClock
from gateway.edge.proxy_tracing import ProxyTracing
from gateway.endpoint import pipeline
from gateway.endpoint.audit_writer import AuditWriter
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step
from gateway.endpoint.steps.limits import Limits
from gateway.endpoint.usage import UsageMeter


async def _nothing(message: Any) -> Any:
    return None


def _request() -> ProxyRequest:
    """A request as the proxy makes one (the compiled pipeline checks what it is given). `begin` sets the request
    id's contextvar, as it does in each request's own task; here it runs in a copied context, so the id does not
    stay set in the test process's main context (later log lines there would carry it)."""
    def made() -> ProxyRequest:
        scope = {"type": "http", "method": "POST", "path": "/endpoints/ep/v1/models", "headers": []}
        audit = AuditWriter(_nothing).request("ep")
        trace = ProxyTracing(tracer=None).begin(scope, "ep", audit.request_id)
        return ProxyRequest(trace, _nothing, _nothing, "ep", "v1/models", audit, UsageMeter(), RequestClock(), False)

    return contextvars.copy_context().run(made)


def test_the_steps_are_declared_in_order_each_in_its_own_module() -> None:
    names = [kind.__name__ for kind in pipeline.ORDER]
    assert names == ["FindRoute", "Credentials", "Scope", "Limits", "Deadline", "Hold", "Forward", "Retry", "Relay"]
    modules = [kind.__module__ for kind in pipeline.ORDER]
    assert len(set(modules)) == len(modules) and all(m.startswith("gateway.endpoint.steps.") for m in modules)


def test_a_step_that_answers_ends_the_request_and_finish_still_runs() -> None:
    proxy = cast(Any, object())
    chain = pipeline.Pipeline(proxy)
    assert all(step.proxy is proxy for step in chain.steps)
    assert [type(step) for step in chain.finishing] == [Limits]
    taken: list[str] = []

    class Passes(Step):
        async def __call__(self, request: ProxyRequest) -> bool:
            taken.append("route")
            return True

    class Answers(Step):
        async def __call__(self, request: ProxyRequest) -> bool:
            taken.append("credentials")
            return False

    class Finishing(Step):
        async def finish(self, request: ProxyRequest) -> None:
            taken.append("finish")

    chain.steps = (Passes(proxy), Answers(proxy), *chain.steps[2:])
    chain.finishing = (Finishing(proxy),)
    asyncio.run(chain(_request()))
    assert taken == ["route", "credentials", "finish"]
