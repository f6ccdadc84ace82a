"""Processes that start together (two API replicas, the API and a node agent) and each find no key file
all end up with the same, whole key: the loser of the race to create it never reads a half-written file."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from berth.security import Cipher, SigningKey

pytestmark = pytest.mark.timeout(60)


def _load_at_once(make: Callable[[Path], object], keys: Path, processes: int = 8) -> list[BaseException]:
    barrier = threading.Barrier(processes)
    errors: list[BaseException] = []

    def load() -> None:
        barrier.wait()
        try:
            make(keys)
        except BaseException as error:  # noqa: BLE001 — reported by the caller's assertion
            errors.append(error)

    threads = [threading.Thread(target=load) for _ in range(processes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return errors


@pytest.mark.parametrize("make", [lambda d: Cipher.load_or_create(d).encrypt(b"x"),
                                  lambda d: SigningKey.load_or_create(d).kid], ids=["data-key", "signing-key"])
def test_concurrent_first_loads_all_get_one_whole_key(tmp_path: Path, make: Callable[[Path], object]) -> None:
    for attempt in range(20):
        keys = tmp_path / f"keys-{attempt}"
        assert _load_at_once(make, keys) == []
        assert [p.name for p in keys.iterdir()] in (["data.key"], ["signing.pem"])  # no staging file left
