"""Issue 13, item 6: an Image is refused at submission, through the real API, rather than accepted and
ignored: no container runtime runs here, and one an administrator names is not supported either."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.catalog.conftest import CatalogApi

IMAGES = {"GPT-OSS 20B": "vllm/vllm-openai:v0.11.0", "vLLM": "vllm/vllm-openai:v0.11.0",
          "LiteLLM Model Gateway": "ghcr.io/berriai/litellm:main-stable",
          "OpenCode": "ghcr.io/me/opencode-with-toolchain:1"}


def _refusal(catalog_api: CatalogApi, entry: str, values: dict[str, str]) -> str:
    response = catalog_api.start(entry, values)
    assert response.status_code == 400, response.text
    assert catalog_api.context.store.workflows() == []
    return str(response.json()["detail"])


@pytest.mark.parametrize("entry", sorted(IMAGES))
def test_an_image_without_a_container_runtime_is_refused(catalog_api: CatalogApi, entry: str) -> None:
    catalog_api.add_node("n1", [80, 80])
    values = {"Image": IMAGES[entry]} | ({"Model": "hf://openai/gpt-oss-20b"} if entry == "vLLM" else {})
    assert _refusal(catalog_api, entry, values) == (
        f"Image={IMAGES[entry]} needs a container runtime; this cluster runs engines bare-metal (no "
        "container_runtime configured). Leave Image empty.")
    # The default (empty) Image gets past every check, on to Temporal (unreachable here: 503).
    response = catalog_api.start(entry, {k: v for k, v in values.items() if k != "Image"})
    assert response.status_code == 503, response.text


@pytest.fixture
def docker_configured(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("BERTH_CONTAINER_RUNTIME", "docker")
    yield


def test_a_configured_runtime_is_not_supported_either(docker_configured: None, catalog_api: CatalogApi) -> None:
    assert catalog_api.context.settings.container_runtime == "docker"
    assert _refusal(catalog_api, "OpenCode", {"Image": IMAGES["OpenCode"]}) == (
        f"Image={IMAGES['OpenCode']}: container runtime docker is not supported by this Berth version, which "
        "runs engines bare-metal. Leave Image empty (and unset BERTH_CONTAINER_RUNTIME).")
