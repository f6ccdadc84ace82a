"""A client generated from `/openapi.json` (openapi-python-client) compiles and speaks to the API: a liveness check
with no token, the caller's identity with one, and a refusal read back as the document's one error shape."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from berth.security import Identity
from server.app import build_context, create_app

ADMIN = Identity(user="client-admin", groups=("default",), org="default", admin=True)
# Its own venv (mk/openapi-client.mk, a dependency of `make test`): it pins an older typer than Berth's CLI uses.
GENERATOR = Path(__file__).parents[2] / ".tools" / "openapi-python-client" / "bin" / "openapi-python-client"
# No post hooks: the generator would run ruff over the package, which the test does not need.
CONFIG = "project_name_override: berth_api\npackage_name_override: berth_api\npost_hooks: []\n"


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[tuple[ModuleType, Any, str]]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # no route below reaches Temporal
    app = create_app(context)
    (tmp_path / "openapi.json").write_text(json.dumps(app.openapi()))
    (tmp_path / "config.yml").write_text(CONFIG)
    assert GENERATOR.exists(), f"{GENERATOR} is missing: run `make openapi-client`"
    subprocess.run([str(GENERATOR), "generate", "--path", "openapi.json",
                    "--config", "config.yml", "--meta", "none", "--output-path", "berth_api",
                    "--fail-on-warning"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("berth_api"), app, context.signing.api_token(ADMIN)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name == "berth_api" or name.startswith("berth_api.")]:
            del sys.modules[name]


async def test_a_generated_client_calls_the_api(generated: tuple[ModuleType, Any, str]) -> None:
    package, app, token = generated
    transport = httpx.ASGITransport(app=app)
    health = importlib.import_module("berth_api.api.default.healthz_healthz_get")
    whoami = importlib.import_module("berth_api.api.default.whoami_v1_whoami_get")
    describe = importlib.import_module("berth_api.api.default.describe_model_v1_models_name_get")
    refusal = importlib.import_module("berth_api.models.refusal").Refusal

    anonymous = package.Client(base_url="http://api").set_async_httpx_client(
        httpx.AsyncClient(transport=transport, base_url="http://api"))
    assert (await health.asyncio(client=anonymous)).status == "ok"

    signed_in = package.AuthenticatedClient(base_url="http://api", token=token).set_async_httpx_client(
        httpx.AsyncClient(transport=transport, base_url="http://api", headers={"Authorization": f"Bearer {token}"}))
    me = await whoami.asyncio(client=signed_in)
    assert (me.name, me.admin) == ("client-admin", True)

    missing = await describe.asyncio_detailed("no-such-model", client=signed_in)
    assert missing.status_code == 404 and isinstance(missing.parsed, refusal)
    assert missing.parsed.code == "not_found" and "no-such-model" in missing.parsed.detail
