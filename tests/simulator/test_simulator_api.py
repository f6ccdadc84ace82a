"""The OpenAI-compatible API over real HTTP, driven with the `openai` SDK as clients do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
import pytest_asyncio
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from simulator.cli import parse_command_line
from simulator.server import create_app
from simulator.testing import LaunchSimulator, SimulatorProcess

WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
# The shared `simulator` fixture serves this name with --max-model-len 64.
SHARED_MODEL = "sim-model"
FRANCE: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER_QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]


@pytest_asyncio.fixture
async def client(simulator: SimulatorProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=simulator.api_url, api_key="x", max_retries=0) as client:
        yield client


async def test_health_and_models(simulator: SimulatorProcess, client: openai.AsyncOpenAI) -> None:
    async with httpx.AsyncClient(base_url=simulator.base_url) as http:
        health = await http.get("/health")
        assert (health.status_code, health.content) == (200, b"")
        listing = (await http.get("/v1/models")).json()
    assert listing["object"] == "list"
    (card,) = listing["data"]
    assert card["id"] == SHARED_MODEL and card["owned_by"] == "vllm" and card["object"] == "model"
    assert card["root"] == "org/sim-model-weights" and card["max_model_len"] == simulator.config.max_model_len
    assert [model.id async for model in client.models.list()] == [SHARED_MODEL]


async def test_chat_completion(client: openai.AsyncOpenAI) -> None:
    reply = await client.chat.completions.create(model=SHARED_MODEL, messages=FRANCE)
    choice = reply.choices[0]
    assert choice.message.content == "The capital of France is Paris."
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (6, 6)

    short = await client.chat.completions.create(model=SHARED_MODEL, messages=FRANCE, max_completion_tokens=2)
    assert (short.choices[0].message.content, short.choices[0].finish_reason) == ("The capital", "length")


async def test_chat_completion_streamed_with_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=SHARED_MODEL,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hello please"},
        ],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish_reasons, usages = [], [], []
    async for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish_reasons.append(choice.finish_reason)
    assert "".join(pieces) == "Simulated reply to: Say hello please"
    assert len(pieces) == 7  # one chunk per token (6) and the closing chunk
    assert finish_reasons[-1] == "stop" and set(finish_reasons[:-1]) == {None}
    (usage,) = usages
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 6, 11)


async def test_completions_plain_and_streamed(client: openai.AsyncOpenAI) -> None:
    reply = await client.completions.create(
        model=SHARED_MODEL, prompt="the capital of France is", max_tokens=20
    )
    assert reply.choices[0].text == "The capital of France is Paris."
    assert reply.usage is not None and reply.usage.prompt_tokens == 5

    stream = await client.completions.create(
        model=SHARED_MODEL,
        prompt="count to three",
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    texts = [choice.text for chunk in chunks for choice in chunk.choices]
    assert texts == ["Simulated", " reply", " to:", ""]
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


async def test_tool_call(client: openai.AsyncOpenAI) -> None:
    reply = await client.chat.completions.create(
        model=SHARED_MODEL,
        messages=WEATHER_QUESTION,
        tools=[WEATHER_TOOL],
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "example"}

    # Once the tool has answered, the reply is words again, so agent loops end.
    after_tool = await client.chat.completions.create(
        model=SHARED_MODEL,
        messages=[
            *WEATHER_QUESTION,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert after_tool.choices[0].finish_reason == "stop"
    assert after_tool.choices[0].message.content == "Simulated reply to: Weather in Paris?"

    plain = await client.chat.completions.create(
        model=SHARED_MODEL, messages=FRANCE, tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert plain.choices[0].message.tool_calls in (None, [])


async def test_tool_call_streamed(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=SHARED_MODEL,
        messages=WEATHER_QUESTION,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    names, arguments, finish_reasons = [], [], []
    async for chunk in stream:
        for choice in chunk.choices:
            finish_reasons.append(choice.finish_reason)
            for call in choice.delta.tool_calls or []:
                assert call.index == 0 and call.function is not None
                names.append(call.function.name)
                arguments.append(call.function.arguments or "")
    assert [name for name in names if name] == ["get_weather"]
    assert len(arguments) == 2  # `{"city":` and ` "example"}`, one chunk per token
    assert json.loads("".join(arguments)) == {"city": "example"}
    assert finish_reasons[-1] == "tool_calls"


async def test_wrong_model_is_404_like_vllm(simulator: SimulatorProcess, client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="no-such-model", messages=FRANCE)
    async with httpx.AsyncClient(base_url=simulator.api_url) as http:
        response = await http.post("/completions", json={"model": "no-such-model", "prompt": "hi"})
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "The model `no-such-model` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


async def test_too_long_is_400(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="maximum context length is 64 tokens"):
        await client.chat.completions.create(model=SHARED_MODEL, messages=FRANCE, max_tokens=60)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        await client.completions.create(model=SHARED_MODEL, prompt="word " * 64)
    # Exactly at the limit is fine: 6 prompt tokens + 58 = 64.
    await client.chat.completions.create(model=SHARED_MODEL, messages=FRANCE, max_tokens=58)


async def test_auto_tool_choice_needs_the_flags(launch_simulator: LaunchSimulator) -> None:
    plain = await launch_simulator("sim/model", env={"BERTH_SIM_TOKENS_PER_SECOND": "0"})
    async with openai.AsyncOpenAI(base_url=plain.api_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError, match="--enable-auto-tool-choice"):
            await client.chat.completions.create(model="sim/model", messages=FRANCE, tools=[WEATHER_TOOL])
        # Naming the tool works without them, as in vLLM.
        named = await client.chat.completions.create(
            model="sim/model",
            messages=FRANCE,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    assert named.choices[0].finish_reason == "tool_calls"


async def test_api_key_guards_the_v1_routes_in_process() -> None:
    config = parse_command_line(["sim/keyed", "--api-key", "secret"], {"BERTH_SIM_TOKENS_PER_SECOND": "0"})
    transport = httpx.ASGITransport(app=create_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://simulator") as http:
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/v1/models")).status_code == 401
        keyed = await http.get("/v1/models", headers={"Authorization": "Bearer secret"})
        assert keyed.status_code == 200 and keyed.json()["data"][0]["id"] == "sim/keyed"


async def test_vllm_api_key_guards_v1_exactly_as_vllm_does() -> None:
    """VLLM_API_KEY as vLLM reads it (Berth's replicas get their key this way, never in argv): /v1 wants
    `Bearer <key>` (the scheme in any case), /health, /metrics and /version stay open, OPTIONS passes."""
    config = parse_command_line(["sim/keyed"], {"VLLM_API_KEY": "k-1", "BERTH_SIM_TOKENS_PER_SECOND": "0"})
    transport = httpx.ASGITransport(app=create_app(config))
    chat = {"model": "sim/keyed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with httpx.AsyncClient(transport=transport, base_url="http://simulator") as http:
        for path in ("/health", "/metrics", "/version"):
            assert (await http.get(path)).status_code == 200
        for headers in ({}, {"Authorization": "Bearer k-2"}, {"Authorization": "Basic k-1"},
                        {"Authorization": "Bearer  k-1"}, {"Authorization": "k-1"}):
            refused = await http.post("/v1/chat/completions", json=chat, headers=headers)
            assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
            assert (await http.get("/v1/models", headers=headers)).status_code == 401
        assert (await http.post("/v1/chat/completions", json=chat, headers={"Authorization": "bearer k-1"})
                ).status_code == 200
        assert (await http.get("/v1/models", headers={"Authorization": "Bearer k-1"})).status_code == 200
        assert (await http.options("/v1/models")).status_code != 401
