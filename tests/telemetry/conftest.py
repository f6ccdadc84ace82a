"""The OTLP receiver fixture for the tracing tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.telemetry.otlp_receiver import OtlpReceiver


@pytest.fixture()
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running
