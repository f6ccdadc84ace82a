"""The test process's heap, settled as Berth's own processes settle theirs (berth/heap.py): once the tests are
collected, and again each time a test module is done, what is alive then is frozen out of every later collection.

Why (docs/performance.md "Test suite"): the cyclic collector walked a pytest process's whole heap (hundreds of
thousands of objects: every test module, app and schema imported or built so far) each time it had grown by a
quarter, and as the tests built apps, stores and models that happened ~65 times in tests/server alone, at ~0.4 s a
walk: 33 s of a 140 s run. Settled, those walks see only what the current module made. What is frozen is never
freed if it later becomes part of a garbage cycle: a few tens of MB a worker, which the wall time pays for."""

from __future__ import annotations

import gc

import pytest

from berth.heap import settle


def pytest_collection_finish(session: pytest.Session) -> None:
    settle()  # the imports and the collected tests; the young threshold raised as the servers raise theirs


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()  # the module's cycles go first: only what is still alive is frozen
        gc.freeze()
