"""The endpoint proxy's pipeline: its steps in the declared order (credentials before scope before limits before
the hold, forward, then retry), each in its own module, made once per proxy; a step that answers ends the request
there, and every `finish` runs once it is over, whatever ended it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.endpoint import pipeline
from gateway.endpoint.steps.limits import Limits


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

    async def passes(request: Any) -> bool:
        taken.append("route")
        return True

    async def answers(request: Any) -> bool:
        taken.append("credentials")
        return False

    async def finished(request: Any) -> None:
        taken.append("finish")

    chain.steps = (cast(Any, passes), cast(Any, answers), *chain.steps[2:])
    chain.finishing = (cast(Any, type("Finishing", (), {"finish": staticmethod(finished)})),)
    asyncio.run(chain(cast(Any, None)))
    assert taken == ["route", "credentials", "finish"]
