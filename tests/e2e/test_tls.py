"""`berth up --tls`: the API and the endpoint proxy serve https with the state dir's private CA; `berth
ca-cert` prints it; the CLI, node agents, the model's LiteLLM hooks (a Proxy=true simulated GPT-OSS 20B)
and clients that trust it work; clients that do not fail as the documents' troubleshooting row says."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from cryptography import x509

from tests.e2e.opencode_support import require_opencode, run_opencode
from tests.support import RunningStack, free_port_base

MODEL = "openai/gpt-oss-20b"
ISSUER_MESSAGE = "unable to get local issuer certificate"  # 001's troubleshooting row


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("tls-stack"))
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB", tls=True)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def endpoint(tls_stack: RunningStack) -> dict[str, str]:
    # GPT-OSS 20B runs behind its LiteLLM proxy (Proxy=true): its hooks read replicas and keys over https.
    workflow_id = tls_stack.start_entry(
        "GPT-OSS 20B", "ExtraArgs='--enable-auto-tool-choice --tool-call-parser hermes'")
    found = tls_stack.endpoint(workflow_id)
    return {"workflow_id": workflow_id, "id": found["id"], "url": found["url"],
            "token": tls_stack.token_for(found["id"], "1h")}


def _ca_file(stack: RunningStack, tmp_path: Path) -> Path:
    path = tmp_path / "cluster-ca.pem"
    path.write_text(stack.cli("ca-cert", "--state-dir", str(stack.state_dir)).stdout)
    return path


def test_urls_are_https_and_ca_cert_verifies_the_servers(tls_stack: RunningStack, tmp_path: Path) -> None:
    assert tls_stack.info["api_url"].startswith("https://127.0.0.1:")
    assert tls_stack.info["proxy_url"].startswith("https://127.0.0.1:")
    ca_path = _ca_file(tls_stack, tmp_path)
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    assert ca.subject == ca.issuer  # the root, which is what clients trust
    for url in (tls_stack.info["api_url"], tls_stack.info["proxy_url"]):
        assert httpx.get(url + "/healthz", verify=ssl.create_default_context(cafile=str(ca_path))).is_success
        with pytest.raises(httpx.ConnectError, match=ISSUER_MESSAGE):
            httpx.get(url + "/healthz", verify=True)
    # The CLI trusts the CA the client config names; the stack printed https URLs and the CA.
    assert tls_stack.cli_json("node", "list")[0]["state"] == "ready"


def test_cli_without_the_ca_says_how_to_trust_it(tls_stack: RunningStack, tmp_path: Path) -> None:
    config = tmp_path / "bare.json"
    config.write_text(json.dumps({"api_url": tls_stack.info["api_url"], "token": tls_stack.token}))
    env = {**tls_stack.env, "BERTH_CONFIG": str(config)}
    env.pop("BERTH_TLS_CA", None)
    refused = tls_stack.cli("node", "list", env=env, check=False)
    assert refused.returncode != 0
    assert ISSUER_MESSAGE in refused.stderr and "BERTH_TLS_CA" in refused.stderr and "berth ca-cert" in refused.stderr
    trusted = tls_stack.cli("node", "list", env={**env, "BERTH_TLS_CA": str(_ca_file(tls_stack, tmp_path))})
    assert "ready" in trusted.stdout


@pytest.mark.litellm
def test_endpoint_through_https_with_sdk_and_curl(tls_stack: RunningStack, endpoint: dict[str, str],
                                                   tmp_path: Path) -> None:
    assert endpoint["url"].startswith("https://")
    ca_path = _ca_file(tls_stack, tmp_path)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=endpoint["token"], max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(cafile=str(ca_path))))
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=16)
    assert reply.choices[0].message.content
    curl = shutil.which("curl")
    assert curl, "curl is needed for the documented troubleshooting check"
    base = [curl, "-sS", "-H", f"Authorization: Bearer {endpoint['token']}", endpoint["url"] + "/v1/models"]
    env = {k: v for k, v in os.environ.items() if k not in ("CURL_CA_BUNDLE", "SSL_CERT_FILE")}
    refused = subprocess.run(base, capture_output=True, text=True, timeout=30, env=env)
    assert refused.returncode != 0 and ISSUER_MESSAGE in refused.stderr
    for trusted_env, extra in (({**env}, ["--cacert", str(ca_path)]), ({**env, "CURL_CA_BUNDLE": str(ca_path)}, [])):
        listed = subprocess.run([*base[:1], *extra, *base[1:]], capture_output=True, text=True, timeout=30,
                                env=trusted_env)
        assert listed.returncode == 0, listed.stderr
        assert [m["id"] for m in json.loads(listed.stdout)["data"]] == [MODEL]


@pytest.mark.litellm
def test_real_opencode_needs_node_extra_ca_certs(tls_stack: RunningStack, endpoint: dict[str, str],
                                                 tmp_path: Path) -> None:
    require_opencode()
    result = tls_stack.cli("endpoint", "opencode-config", endpoint["id"])
    assert "NODE_EXTRA_CA_CERTS" in result.stderr
    config: dict[str, Any] = json.loads(result.stdout)
    assert config["provider"]["berth"]["options"]["baseURL"] == endpoint["url"] + "/v1"
    prompt = ["run", "--model", f"berth/{MODEL}", "Reply with the single word: ready"]
    env = {"BERTH_TOKEN": endpoint["token"]}
    untrusted = run_opencode(tmp_path / "untrusted", config, prompt, env, timeout=120)
    assert ISSUER_MESSAGE in (untrusted.stdout + untrusted.stderr).lower(), untrusted.stdout + untrusted.stderr
    assert "Simulated reply" not in untrusted.stdout
    trusted = run_opencode(tmp_path / "trusted", config, prompt,
                           {**env, "NODE_EXTRA_CA_CERTS": str(_ca_file(tls_stack, tmp_path))})
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert "Simulated reply" in trusted.stdout


@pytest.mark.litellm
def test_opencode_entry_reaches_an_https_endpoint(tls_stack: RunningStack, endpoint: dict[str, str]) -> None:
    """The OpenCode entry's pre-flight (node agent) and `opencode serve` (NODE_EXTRA_CA_CERTS from the node)
    trust the private CA: a prompt through OpenCode's https Berth endpoint gets the model's answer."""
    require_opencode()
    workflow_id = tls_stack.start_entry("OpenCode", f"Endpoint={endpoint['url']},Model={MODEL},ServiceScope=public")
    show = tls_stack.cli("workflow", "log", workflow_id, "show-server").stdout
    password = re.search(r"password: (\S+)", show)
    assert password
    # An attaching client that does not trust the CA sees only "Session not found" (issue 31): the log says why.
    assert "NODE_EXTRA_CA_CERTS" in show and "Session not found" in show
    served = tls_stack.endpoint(workflow_id)["url"]
    assert served.startswith("https://")
    basic = {"Authorization": "Basic " + base64.b64encode(f"opencode:{password.group(1)}".encode()).decode()}
    with httpx.Client(verify=tls_stack.verify, headers=basic, timeout=180) as client:
        session = client.post(served + "/session", json={})
        assert session.status_code == 200, session.text
        prompt = {"parts": [{"type": "text", "text": "Reply with the single word: ready"}]}
        reply = client.post(served + f"/session/{session.json()['id']}/message", json=prompt).json()
    assert reply["info"]["role"] == "assistant" and "error" not in reply["info"], reply["info"].get("error")
    assert any(p.get("type") == "text" and p.get("text") for p in reply["parts"]), reply["parts"]
    tls_stack.cli("workflow", "stop", workflow_id)


def test_operator_certificate_options_are_checked(tls_stack: RunningStack, tmp_path: Path) -> None:
    up = ["up", "--state-dir", str(tmp_path / "state"), "--port-base", str(free_port_base())]
    partial = tls_stack.cli(*up, "--tls-cert", str(tmp_path / "server.pem"), check=False)
    assert partial.returncode != 0 and "Give all of --tls-cert, --tls-key and --tls-ca" in partial.stderr
    names = tls_stack.cli(*up, "--tls-name", "berth.example", check=False)
    assert names.returncode != 0 and "use it with --tls" in names.stderr
    missing = tls_stack.cli("ca-cert", "--state-dir", str(tmp_path / "none"), check=False)
    assert missing.returncode != 0 and "berth up --tls" in missing.stderr


def test_operator_certificate_serves_the_stack(tmp_path: Path) -> None:
    """`--tls-cert/--tls-key/--tls-ca`: the operator's files (here made by another CA) serve the API and the
    proxy, the client config and `berth ca-cert` name the operator's CA, and the state dir makes no CA."""
    from berth.tls import ensure_private_ca

    operator = ensure_private_ca(tmp_path / "operator-ca")
    stack = RunningStack(state_dir=tmp_path / "state", port_base=free_port_base(), nodes=1,
                         tls_files=(operator.cert, operator.key, operator.ca))
    try:
        stack.start()
        assert stack.info["api_url"].startswith("https://") and stack.info["ca_file"] == str(operator.ca)
        assert stack.cli("ca-cert", "--state-dir", str(stack.state_dir)).stdout == operator.ca.read_text()
        assert httpx.get(stack.info["proxy_url"] + "/healthz", verify=stack.verify).is_success
        assert stack.cli_json("node", "list")[0]["state"] == "ready"
        assert not (stack.state_dir / "keys" / "tls").exists()
    finally:
        stack.stop()
