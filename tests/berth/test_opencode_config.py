"""OpenCode's provider block as pure functions (issue 31): each model's `limit` from its own pool's context, the
reply's share of it, the default model (the largest context), and a gateway's block over pools of different
contexts, SmolLM2's 8,192 among them."""

from __future__ import annotations

import pytest

from berth.contracts import ServedModel
from berth.errors import UserInputError
from berth.opencode import (
    ProviderTarget,
    default_output_limit,
    opencode_config,
    pick_default_model,
    served_target,
)

GATEWAY = "https://proxy/endpoints/ep-gw"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
GPT = "openai/gpt-oss-20b"
SERVED = [ServedModel(model_id=SMOL, max_context=8192, tool_calling=True),
          ServedModel(model_id=QWEN, max_context=32768, tool_calling=True),
          ServedModel(model_id=GPT, max_context=131072, tool_calling=False)]


@pytest.mark.parametrize(("context", "output"), [(8192, 2048), (32768, 8192), (131072, 8192), (256, 64), (3, 1)])
def test_the_reply_gets_a_quarter_of_the_context_at_most_8192(context: int, output: int) -> None:
    assert default_output_limit(context) == output


def test_the_default_is_the_largest_context_the_first_listed_among_equals() -> None:
    assert pick_default_model([("a", 8192), ("b", 32768), ("c", 16384)]) == "b"
    assert pick_default_model([("a", 8192), ("b", 32768), ("c", 32768)]) == "b"
    with pytest.raises(UserInputError, match="No model to make OpenCode's default"):
        pick_default_model([])


def test_a_gateway_block_gives_each_model_its_own_pools_limits_and_never_defaults_to_smollm2() -> None:
    target = served_target(GATEWAY, [GPT, QWEN, SMOL], SERVED)
    config = opencode_config({"berth": target})
    models = config["provider"]["berth"]["models"]
    assert {model: entry["limit"] for model, entry in models.items()} == {
        SMOL: {"context": 8192, "output": 2048},  # the failure: 8192 as the reply left nothing
        QWEN: {"context": 32768, "output": 8192},
        GPT: {"context": 131072, "output": 8192},
    }
    assert all(limit["output"] < limit["context"] for limit in (m["limit"] for m in models.values()))
    assert config["model"] == f"berth/{GPT}"
    assert config["provider"]["berth"]["options"]["baseURL"] == GATEWAY + "/v1"


def test_a_named_default_is_kept_even_a_small_one() -> None:
    config = opencode_config({"berth": served_target(GATEWAY, None, SERVED)}, default_model=SMOL)
    assert config["model"] == f"berth/{SMOL}"
    with pytest.raises(UserInputError, match="Model=org/none is not listed"):
        opencode_config({"berth": served_target(GATEWAY, None, SERVED)}, default_model="org/none")


def test_unasked_the_block_lists_what_the_api_gives() -> None:
    target = served_target(GATEWAY, None, SERVED)
    assert target.model_ids == (SMOL, QWEN, GPT)


def test_a_listed_model_the_api_did_not_give_gets_the_smallest_context_known() -> None:
    """A pool discovered between the API's answer and /v1/models: too small a context is the safe guess."""
    target = served_target(GATEWAY, [QWEN, "org/newcomer"], SERVED)
    assert target.limit("org/newcomer") == {"context": 8192, "output": 2048}
    assert served_target(GATEWAY, ["org/newcomer"], [], fallback_context=16384).limit("org/newcomer") == {
        "context": 16384, "output": 4096}
    with pytest.raises(UserInputError, match="reports no model's context"):
        served_target(GATEWAY, ["org/newcomer"], [])


def test_an_output_limit_that_does_not_fit_a_model_is_refused_naming_it() -> None:
    with pytest.raises(UserInputError) as refused:
        served_target(GATEWAY, None, SERVED, output_limit=8192)
    assert str(refused.value) == f"The output limit (8192) must be below the context of {SMOL} (8192)."
    fits = served_target(GATEWAY, None, SERVED, output_limit=4096)
    assert {fits.limit(model)["output"] for model in fits.model_ids} == {4096}


def test_one_endpoint_one_context_as_before() -> None:
    target = ProviderTarget(url="https://proxy/endpoints/ep-a", model_ids=(SMOL,), max_context=8192)
    config = opencode_config({"berth": target})
    assert config["provider"]["berth"]["models"][SMOL]["limit"] == {"context": 8192, "output": 2048}
    assert config["model"] == f"berth/{SMOL}"
    with pytest.raises(UserInputError, match=r"^The output limit \(8192\) must be below the context \(8192\)\.$"):
        ProviderTarget(url="https://proxy/endpoints/ep-a", model_ids=(SMOL,), max_context=8192, output_limit=8192)


def test_across_providers_the_default_is_the_largest_context_of_all() -> None:
    small = ProviderTarget(url="https://proxy/endpoints/ep-a", model_ids=(SMOL,), max_context=8192)
    config = opencode_config({"berth": small, "berth-2": served_target(GATEWAY, [QWEN], SERVED)})
    assert config["model"] == f"berth-2/{QWEN}"
