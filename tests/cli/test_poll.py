"""cli/common.poll: `--watch` and `workflow stop`'s wait ask the API twice a second through one client (a client of
its own a question cost each a TLS context and an event loop), until what they wait for comes or time runs out."""

from __future__ import annotations

from collections.abc import Awaitable
from types import TracebackType
from typing import Any

import pytest
import typer

import cli.common
from berth.errors import BerthError
from cli.common import poll


class Client:
    """Stands in for ApiClient: counts the clients made and answers each question with the next of `answers`."""

    made = 0
    answers: list[Any] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Client.made += 1
        self.asked = 0

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        return None

    async def next(self) -> Any:
        self.asked += 1
        answer = Client.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def ask(api: Any) -> Awaitable[Any]:
    return api.next()  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.common, "api_client", lambda: Client)
    monkeypatch.setenv("BERTH_API_URL", "http://127.0.0.1:9")
    Client.made = 0


def test_one_client_asks_until_the_answer_is_seen() -> None:
    Client.answers = ["starting", "starting", "ready", "never asked"]
    shown: list[str] = []

    def seen(answer: str) -> str | None:
        shown.append(answer)
        return answer.upper() if answer == "ready" else None

    assert poll(ask, seen, 0.01, 10) == "READY"
    assert shown == ["starting", "starting", "ready"] and Client.made == 1


def test_time_running_out_is_none() -> None:
    Client.answers = ["starting"] * 1000
    assert poll(ask, lambda answer: None, 0.01, 0.05) is None
    assert Client.made == 1 and len(Client.answers) < 1000


def test_a_refusal_while_waiting_is_one_line_and_exit_1() -> None:
    Client.answers = ["starting", BerthError("workflow wf-1 not found")]
    with pytest.raises(typer.Exit) as exit_info:
        poll(ask, lambda answer: None, 0.01, 10)
    assert exit_info.value.exit_code == 1
