"""Identity end to end: users, groups and organizations made with the CLI, the scope matrix, the
documents' troubleshooting rows through the real endpoint proxy and the real per-model LiteLLM proxy,
caller assertions that cannot be forged, and secrets absent from logs and the Temporal history."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.security import Identity, SigningKey
from berth.settings import venv_bin
from tests.support import RunningStack, free_port_base, processes_mentioning, wait_for

pytestmark = pytest.mark.litellm
SECRET_KEY = "sk-user-secret-0123456789abcdef"
CHAT = {"model": "openai/gpt-oss-20b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
# Who calls, by name: (organization, groups) as the CLI creates them; "admin" owns every workflow.
PEOPLE = {"admin": ("default", ("default",)), "bob": ("default", ("default",)),
          "carol": ("default", ("ops",)), "dave": ("acme", ("acme-eng",))}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("identity-stack"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="6x80GB")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def world(stack: RunningStack) -> dict[str, Any]:
    """Users made with the new commands, their API tokens, and five endpoints."""
    stack.cli("group", "create", "ops")
    stack.cli("group", "create", "acme-eng", "--org", "acme")
    stack.cli("user", "create", "bob", "--group", "default")
    stack.cli("user", "create", "carol")
    stack.cli("group", "add-member", "ops", "carol")
    stack.cli("user", "create", "dave", "--org", "acme", "--group", "acme-eng")
    api_tokens = {"admin": stack.token}
    for name in ("bob", "carol", "dave"):
        api_tokens[name] = stack.cli("login", "--user", name, "--print-token").stdout.strip()
    stack.cli("secret", "create", "secret://user/litellm-key", input=SECRET_KEY)
    workflows = {
        "group": stack.start_entry("GPT-OSS 20B"),
        "public": stack.start_entry("GPT-OSS 20B", "Scope=public,ApiKeySecret=secret://user/litellm-key"),
        "user": stack.start_entry("GPT-OSS 20B", "Scope=user,Proxy=false"),
        "organization": stack.start_entry("GPT-OSS 20B", "Scope=organization,Proxy=false"),
        # Asks for 4 GPUs while 2 are free: its LiteLLM proxy runs, no replica is ever ready.
        "empty": stack.start_entry("vLLM", "Model=hf://openai/gpt-oss-20b,GpusPerNode=4", watch=False),
    }
    endpoints = {scope: stack.endpoint(wf) for scope, wf in workflows.items()}
    wait_for(lambda: any(e["kind"] == "service_ready" for e in stack.describe(workflows["empty"])["events"]),
             120, "the empty pool's LiteLLM proxy")
    return {"api_tokens": api_tokens, "workflows": workflows, "endpoints": endpoints,
            "key": SigningKey.load_or_create(stack.state_dir / "keys")}


def endpoint_token(stack: RunningStack, world: dict[str, Any], person: str, scope: str) -> str:
    """An endpoint token minted by `berth endpoint generate-token` as `person`; where the API refuses
    (outside the scope) one is signed directly, to show the proxy refuses it as well."""
    endpoint_id = world["endpoints"][scope]["id"]
    env = {**stack.env, "BERTH_TOKEN": world["api_tokens"][person]}
    result = stack.cli("endpoint", "generate-token", endpoint_id, "--expiration", "1h", env=env, check=False)
    if result.returncode == 0:
        return result.stdout.strip()
    assert "outside endpoint" in result.stderr
    org, groups = PEOPLE[person]
    return str(world["key"].endpoint_token(Identity(person, groups, org), endpoint_id, 3600))


def get_models(world: dict[str, Any], scope: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.get(world["endpoints"][scope]["url"] + "/v1/models", headers=headers, timeout=30)


# --- the scope matrix ---------------------------------------------------------------------------------
NO_KEY = "Authentication Error, No api key passed in."
MATRIX = {
    #               owner  same group  same org  other org  anonymous
    "user":         (200,  403,        403,      403,       401),
    "group":        (200,  200,        403,      403,       401),
    "organization": (200,  200,        200,      403,       401),
    "public":       (200,  200,        200,      NO_KEY,    NO_KEY),
}


@pytest.mark.parametrize("scope", list(MATRIX))
def test_scope_matrix(stack: RunningStack, world: dict[str, Any], scope: str) -> None:
    for person, expected in zip(["admin", "bob", "carol", "dave", None], MATRIX[scope], strict=True):
        token = None if person is None else endpoint_token(stack, world, person, scope)
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        response = get_models(world, scope, headers)
        if expected == NO_KEY:  # public: let through, but LiteLLM learned nothing about the caller
            assert response.status_code == 401 and NO_KEY in response.text, (person, response.text)
            continue
        assert response.status_code == expected, (scope, person, response.status_code, response.text)
        if expected == 200:
            assert [m["id"] for m in response.json()["data"]] == ["openai/gpt-oss-20b"]
        elif expected == 401:
            assert response.text == "Unauthorized"
        else:
            assert f"{scope}-scoped" in response.text


# --- the documents' troubleshooting table ------------------------------------------------------------
def test_row_non_public_without_token_is_plain_401(world: dict[str, Any]) -> None:
    response = get_models(world, "group", {})
    assert (response.status_code, response.text) == (401, "Unauthorized")
    assert response.headers["content-type"].startswith("text/plain")


def test_row_public_without_key_asks_for_one(world: dict[str, Any]) -> None:
    response = httpx.post(world["endpoints"]["public"]["url"] + "/v1/chat/completions", json=CHAT, timeout=30)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == NO_KEY


def test_row_wrong_key_decides_even_with_a_valid_identity(stack: RunningStack, world: dict[str, Any]) -> None:
    token = endpoint_token(stack, world, "admin", "group")
    headers = {"Authorization": f"Bearer {token}", "x-litellm-api-key": "sk-stale-key"}
    response = get_models(world, "group", headers)
    assert response.status_code == 401 and "Invalid proxy server token" in response.text
    response = get_models(world, "public", {"Authorization": "Bearer sk-wrong-wrong"})
    assert response.status_code == 401 and "Invalid proxy server token" in response.text


def test_right_keys_admit(stack: RunningStack, world: dict[str, Any]) -> None:
    # ApiKeySecret: the user's secret is the public endpoint's master key.
    assert get_models(world, "public", {"Authorization": f"Bearer {SECRET_KEY}"}).status_code == 200
    # Generated: the owner reads it with `workflow get`; nobody else may.
    definition = stack.cli("workflow", "get", world["workflows"]["group"]).stdout
    words = [word.strip('",') for word in definition.split()]
    generated = next(word for word in words if word.startswith("sk-berth-"))
    token = endpoint_token(stack, world, "admin", "group")
    headers = {"Authorization": f"Bearer {token}", "x-litellm-api-key": generated}
    response = get_models(world, "group", headers)
    assert response.status_code == 200
    env = {**stack.env, "BERTH_TOKEN": world["api_tokens"]["bob"]}
    refused = stack.cli("workflow", "get", world["workflows"]["group"], env=env, check=False)
    assert refused.returncode != 0 and "sk-berth-" not in refused.stdout + refused.stderr


def test_row_no_replica_ready(stack: RunningStack, world: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {endpoint_token(stack, world, 'admin', 'empty')}"}
    listing = httpx.get(world["endpoints"]["empty"]["url"] + "/v1/models", headers=headers, timeout=30)
    assert listing.status_code == 200 and listing.json()["data"] == []
    chat = httpx.post(world["endpoints"]["empty"]["url"] + "/v1/chat/completions", headers=headers,
                      timeout=30, json=CHAT)
    assert chat.status_code == 400 and "Invalid model name" in chat.text


def test_row_group_secret_refused_for_api_key(stack: RunningStack) -> None:
    result = stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values",
                       "ApiKeySecret=secret://group/shared-key", check=False)
    assert result.returncode != 0
    assert "ApiKeySecret must be a user-scoped secret reference" in result.stderr


@pytest.mark.parametrize("case", ["expired", "other-endpoint"])
def test_expired_and_foreign_tokens(world: dict[str, Any], case: str) -> None:
    admin = Identity("admin", ("default",), "default")
    target = world["endpoints"]["group"]["id"] if case == "expired" else world["endpoints"]["public"]["id"]
    token = world["key"].endpoint_token(admin, target, -10 if case == "expired" else 3600)
    response = get_models(world, "group", {"Authorization": f"Bearer {token}"})
    assert (response.status_code, response.text) == (401, "Unauthorized")


# --- caller assertions cannot be forged ----------------------------------------------------------------
def test_client_sent_assertion_is_stripped(world: dict[str, Any]) -> None:
    """Even a genuine assertion (replayed) is dropped: only the proxy speaks for a caller."""
    endpoint_id = world["endpoints"]["public"]["id"]
    genuine = world["key"].caller_assertion(Identity("admin", ("default",), "default"), endpoint_id)
    response = get_models(world, "public", {"x-berth-caller": genuine})
    assert response.status_code == 401 and NO_KEY in response.text


def test_litellm_refuses_a_tampered_assertion(stack: RunningStack, world: dict[str, Any]) -> None:
    endpoint_id = world["endpoints"]["public"]["id"]
    routes = stack.api("GET", "/v1/internal/routes").json()["endpoints"]
    service_url = next(r["service_url"] for r in routes if r["id"] == endpoint_id)
    genuine = world["key"].caller_assertion(Identity("dave", (), "acme"), endpoint_id)
    assert httpx.get(service_url + "/v1/models", headers={"x-berth-caller": genuine}).status_code == 200
    header, payload, signature = genuine.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "admin"
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    tampered = ".".join([header, forged_payload, signature])
    response = httpx.get(service_url + "/v1/models", headers={"x-berth-caller": tampered})
    assert response.status_code == 401 and NO_KEY in response.text


# --- secrets and generated keys stay secret ------------------------------------------------------------
def generated_key(stack: RunningStack, workflow_id: str) -> str:
    definition = stack.api("GET", f"/v1/workflows/{workflow_id}/definition").json()["definition"]
    return str(definition["api_key"])


def test_secrets_absent_from_logs_argv_and_history(stack: RunningStack, world: dict[str, Any]) -> None:
    generated = generated_key(stack, world["workflows"]["group"])
    assert generated.startswith("sk-berth-")
    needles = [SECRET_KEY.encode(), generated.encode()]
    logs = [p for p in (stack.state_dir / "logs").rglob("*") if p.is_file()]
    assert any("litellm" in p.parts for p in logs)
    for path in logs:
        data = path.read_bytes()
        assert not any(n in data for n in needles), f"a key leaked into {path}"
    for line in processes_mentioning(str(stack.state_dir)):
        assert not any(n.decode() in line for n in needles), "a key is on a command line"

    fronts: dict[str, str] = {}  # pool workflow id → its FrontWorkflow's id (where run_service runs)

    async def raw_histories() -> bytes:
        from temporalio.client import Client

        client = await Client.connect(stack.info["temporal_address"])  # no codec: what the UI would see
        blob = b""
        for workflow_id in world["workflows"].values():
            # The pool and its children (copies, the FrontWorkflow that runs the LiteLLM service).
            async for execution in client.list_workflows(f'WorkflowId STARTS_WITH "{workflow_id}"'):
                if execution.workflow_type == "FrontWorkflow":
                    fronts[workflow_id] = execution.id
                handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
                async for event in handle.fetch_history_events():
                    blob += event.SerializeToString()
        return blob

    history = asyncio.run(raw_histories())
    assert b"run_service" in history and b"ServiceWorkflow" in history  # the search has something to search
    assert not any(n in history for n in needles), "a key is readable in a Temporal history"
    shown = subprocess.run(
        [str(venv_bin("temporal")), "workflow", "show", "--workflow-id", fronts[world["workflows"]["public"]],
         "--address", stack.info["temporal_address"], "--output", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "run_service" in shown and not any(n.decode() in shown for n in needles)


def test_user_list_and_login(stack: RunningStack, world: dict[str, Any]) -> None:
    rows = {r["name"]: r for r in stack.cli_json("user", "list")}
    assert rows["dave"]["org"] == "acme" and rows["dave"]["groups"] == ["acme-eng"]
    assert rows["carol"]["groups"] == ["ops"]
    env = {**stack.env, "BERTH_TOKEN": world["api_tokens"]["dave"]}
    refused = stack.cli("user", "create", "eve", env=env, check=False)
    assert refused.returncode != 0 and "administrators" in refused.stderr.lower()
    config = stack.state_dir / "dave.json"
    login_env = {**stack.env, "BERTH_CONFIG": str(config)}
    login_env["BERTH_API_URL"] = stack.info["api_url"]
    stack.cli("login", "--token", world["api_tokens"]["dave"], env=login_env)
    assert json.loads(config.read_text())["token"] == world["api_tokens"]["dave"]
    assert config.stat().st_mode & 0o077 == 0
