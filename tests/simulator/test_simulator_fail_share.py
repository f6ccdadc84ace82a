"""`--fail-share` (a canary's fault, issue 17): that share of completion requests answers 500 with vLLM's
error body, evenly and the same every run; the flag is the simulator's own, in its help, and passes
ExtraArgs' check (a catalog entry sets it there)."""

from __future__ import annotations

import httpx
import pytest

from catalog.berth_flags import extra_args_refusal
from simulator.cli import CommandLineError, help_text, parse_command_line
from simulator.server import create_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def _statuses(share: str, path: str, body: dict[str, object], n: int) -> list[int]:
    config = parse_command_line(["m", "--fail-share", share], {"BERTH_SIM_TOKENS_PER_SECOND": "100000"})
    transport = httpx.ASGITransport(app=create_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        answers = [await client.post(path, json=body) for _ in range(n)]
    for answer in answers:
        if answer.status_code == 500:
            assert answer.json()["error"]["code"] == 500 and answer.json()["error"]["type"] == "InternalServerError"
    return [a.status_code for a in answers]


async def test_half_of_the_chat_completions_fail_every_second_one() -> None:
    assert await _statuses("0.5", "/v1/chat/completions", CHAT, 6) == [200, 500] * 3


async def test_a_quarter_of_the_completions_fail() -> None:
    statuses = await _statuses("0.25", "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 2}, 8)
    assert statuses == [200, 200, 200, 500] * 2


async def test_without_the_flag_nothing_fails() -> None:
    config = parse_command_line(["m"], {"BERTH_SIM_TOKENS_PER_SECOND": "100000"})
    assert config.fail_share == 0.0
    transport = httpx.ASGITransport(app=create_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        assert {(await client.post("/v1/chat/completions", json=CHAT)).status_code for _ in range(4)} == {200}


def test_the_flag_is_checked_documented_and_allowed_in_extra_args() -> None:
    with pytest.raises(CommandLineError, match="--fail-share 1.5"):
        parse_command_line(["m", "--fail-share", "1.5"], {})
    assert "--fail-share" in help_text()
    assert extra_args_refusal(["--fail-share", "0.5"]) is None
    assert parse_command_line(["m", "--fail-share", "0.5"], {}).ignored_args == ()
