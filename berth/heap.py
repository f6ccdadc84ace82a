"""The heap of a long-lived Berth process, settled for the cyclic garbage collector once the process has started:
`settle` collects what startup left, freezes what survives out of every later collection and raises the young
threshold. The HTTP servers (the endpoint proxy, the model gateway, the API) settle once uvicorn is listening
(berth/settled_server.py); the control worker and the node agent once they are running.

Why (issue 33, docs/performance.md "The collector's share"): under load CPython's cyclic collector took ~10 % of the
endpoint proxy's CPU. With 32 requests in flight, the count of young container objects passes its default threshold
of 700 every ~20 requests, and every hundredth of those collections walks every object the process holds (84,000 in
the proxy, most of them made while importing its modules: ~29 ms a walk). What startup made lives as long as the
process, so it is collected once and then frozen out of every later collection (`gc.freeze`), and the young
threshold is raised so a collection comes every few hundred requests. Garbage without reference cycles is still
freed at once by its reference count; cycles are still found, a little later."""

from __future__ import annotations

import gc

# Container objects allocated (less those freed) before a young collection: CPython's default is 700.
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Collect what startup left, freeze what survives out of later collections, raise the young threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
