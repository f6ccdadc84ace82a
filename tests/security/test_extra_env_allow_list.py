"""Security issue 29, finding 12: `ExtraEnv` accepted `HF_ENDPOINT` and `VLLM_HOST_IP`. The rule was a family
(`VLLM_*`, `HF_*`, …) minus credentials and files, so a user could point the engine's downloads at another host,
move the address its ranks announce, or have usage reports sent to a host of their choosing
(`VLLM_USAGE_STATS_SERVER`). Now ExtraEnv is an allow-list of tuning variables (catalog/extra_env.py), refused at
submission in one line that names the allowed ones; the family rule still runs first and keeps its messages.
The checks here need no stack."""

from __future__ import annotations

import pytest

from berth.child_environment import user_variable_problem
from berth.errors import UserInputError
from catalog.entry import find_entry
from catalog.extra_env import ALLOWED
from catalog.render import render, resolve_values
from tests.catalog.conftest import CatalogApi, catalog_api  # noqa: F401  (the in-process API fixture)

ENTRY = "vLLM"
MODEL = "hf://Qwen/Qwen3-0.6B"


def _render(extra_env: str) -> dict[str, str]:
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, {"Model": MODEL, "ExtraEnv": extra_env}))
    assert definition.replica is not None
    return definition.replica.engine.extra_env


def _refusal(extra_env: str) -> str:
    with pytest.raises(UserInputError) as caught:
        _render(extra_env)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("extra_env", [
    "HF_ENDPOINT=http://evil.example", "VLLM_HOST_IP=10.9.9.9", "VLLM_PORT=1",
    "VLLM_USAGE_STATS_SERVER=http://evil.example", "VLLM_LOOPBACK_IP=10.9.9.9", "VLLM_DP_MASTER_IP=10.9.9.9",
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS=1", "HF_HUB_OFFLINE=0", "NCCL_COMM_ID=10.9.9.9:1", "OMP_A=1", "VLLM_FOO=1",
    "NCCL_SOCKET_IFNAME=lo UCX_TLS=tcp", "nccl_socket_ifname=lo",
])
def test_variables_off_the_list_are_refused_in_one_line_that_names_the_allowed(extra_env: str) -> None:
    name = next(pair.split("=")[0] for pair in extra_env.split() if pair.split("=")[0] not in ALLOWED)
    message = _refusal(extra_env)
    assert message.startswith(f"ExtraEnv may not set {name}: ExtraEnv takes only the engine tuning variables "
                              "Berth lists (")
    assert "NCCL_SOCKET_IFNAME" in message and "OMP_NUM_THREADS" in message
    assert "an operator sets others on the node agent" in message


@pytest.mark.parametrize(("extra_env", "expected"), [
    ("PYTHONWARNINGS=all:0:antigravity.x:0:0", "ExtraEnv may not set PYTHONWARNINGS: Python reads it at start-up"),
    ("CUDA_VISIBLE_DEVICES=0", "ExtraEnv may not set CUDA_VISIBLE_DEVICES: Berth assigns each rank its GPUs"),
    ("VLLM_API_KEY=x", "ExtraEnv may not set VLLM_API_KEY: "),
    ("HF_TOKEN=hf_x", "ExtraEnv may not set HF_TOKEN: it names a credential"),
    ("VLLM_LOGGING_CONFIG_PATH=/tmp/c.json", "ExtraEnv may not set VLLM_LOGGING_CONFIG_PATH: it points the engine"),
])
def test_the_earlier_refusals_keep_their_messages(extra_env: str, expected: str) -> None:
    assert _refusal(extra_env).startswith(expected)


def test_listed_tuning_variables_pass() -> None:
    extra_env = ("NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5 OMP_NUM_THREADS=8 VLLM_LOGGING_LEVEL=DEBUG "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True TOKENIZERS_PARALLELISM=false")
    assert _render(extra_env) == dict(pair.split("=", 1) for pair in extra_env.split())


def test_every_listed_name_also_passes_the_family_rule() -> None:
    """The list only narrows berth/child_environment.py: nothing on it names a credential, a file or code."""
    assert [name for name in sorted(ALLOWED) if user_variable_problem(name)] == []
    assert not {"VLLM_HOST_IP", "VLLM_PORT", "HF_ENDPOINT", "VLLM_USAGE_STATS_SERVER", "CUDA_VISIBLE_DEVICES"} & ALLOWED


def test_the_api_refuses_at_submission(catalog_api: CatalogApi) -> None:  # noqa: F811
    catalog_api.add_node("node-a", [80, 80, 80, 80])
    for extra_env in ("HF_ENDPOINT=http://evil.example", "VLLM_HOST_IP=10.9.9.9"):
        response = catalog_api.start(ENTRY, {"Model": MODEL, "ExtraEnv": extra_env})
        assert response.status_code == 400, response.text
        assert response.json()["detail"].startswith(f"ExtraEnv may not set {extra_env.split('=')[0]}: ")
    assert catalog_api.context.store.workflows() == []
    allowed = catalog_api.start(ENTRY, {"Model": MODEL, "ExtraEnv": "NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5"})
    assert allowed.status_code == 503 and "Temporal" in allowed.json()["detail"]
