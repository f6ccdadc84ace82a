"""A local Temporal dev server for the workflow tests: the binary the project installs (never a download),
with the control worker's data converter (pydantic payloads, encrypted by the cluster's codec)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from berth.security import Cipher, SigningKey
from berth.settings import venv_bin
from berth.temporal import data_converter
from tests.workflows.harness import Harness


@pytest.fixture(scope="session")
async def temporal_env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkflowEnvironment]:
    cipher = Cipher.load_or_create(Path(tmp_path_factory.mktemp("workflow-keys")))
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(venv_bin("temporal")),
                                                data_converter=data_converter(cipher))
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def harness(temporal_env: WorkflowEnvironment, tmp_path: Path) -> Harness:
    return Harness(client=temporal_env.client, signing=SigningKey.load_or_create(tmp_path))
