"""A starting agent's first heartbeat waits (bounded) for an API that is not answering yet, instead of exiting."""

from __future__ import annotations

import pytest

from berth.errors import AuthenticationError, UnavailableError
from node.agent import first_heartbeat


class Api:
    """Answers the heartbeat after `down` refusals of kind `error`."""

    def __init__(self, down: int, error: Exception) -> None:
        self.down, self.error, self.calls = down, error, 0

    async def heartbeat(self) -> None:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error


async def test_an_api_back_within_the_wait_gets_the_heartbeat(caplog: pytest.LogCaptureFixture) -> None:
    api = Api(down=3, error=UnavailableError("Cannot reach the Berth API at http://127.0.0.1:1."))
    await first_heartbeat(api.heartbeat, wait_s=5.0, retry_s=0.01)
    assert api.calls == 4
    # Said once, not once per try.
    assert sum("first heartbeat is sent again" in r.getMessage() for r in caplog.records) == 1


async def test_an_api_down_for_longer_than_the_wait_is_raised() -> None:
    api = Api(down=10_000, error=UnavailableError("Cannot reach the Berth API at http://127.0.0.1:1."))
    with pytest.raises(UnavailableError):
        await first_heartbeat(api.heartbeat, wait_s=0.05, retry_s=0.01)
    assert 2 <= api.calls <= 6


async def test_a_refusal_is_raised_at_once() -> None:
    api = Api(down=1, error=AuthenticationError("the node token was refused"))
    with pytest.raises(AuthenticationError):
        await first_heartbeat(api.heartbeat, wait_s=5.0, retry_s=0.01)
    assert api.calls == 1
