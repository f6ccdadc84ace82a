"""Collections at safe points: LiteLLM's process on CPython before 3.12 collects garbage from a timer, not
in the middle of whatever C code happened to allocate.

Why (CPython gh-148891): before 3.12 a collection can fire on any allocation, including the HAMT nodes that
`ContextVar.set` and `.reset` allocate. A finaliser or weakref callback the collection runs may set a context
variable again, which frees the HAMT the interrupted call is still walking: a segmentation fault. LiteLLM sets
and resets context variables around every request; in CI its process died of exactly that, on the main thread
inside `litellm/_internal_context.py` `_restore` (`ContextVar.reset`). CPython 3.12 runs collections only
between bytecodes, where no HAMT operation is under way. This does the same by hand: automatic collection
off, and a timer on the event loop that collects whichever generation CPython's own thresholds say is due.
tests/gateway/litellm_hooks/test_gc_pacing.py crashes the interpreter the old way and not this way.

Runs inside LiteLLM's virtualenv: the standard library only."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from typing import Final

logger: Final = logging.getLogger("LiteLLM Proxy").getChild("berth_gc")
logger.setLevel(logging.INFO)

# What CPython 3.11 collects after about 700 allocations, this collects after at most one interval: a cycle
# of garbage lives that much longer, and a busy worker collects fewer, larger young generations.
INTERVAL_S: Final = 0.05
SAFE_SINCE: Final = (3, 12)


def due_generation(counts: tuple[int, int, int], thresholds: tuple[int, int, int]) -> int | None:
    """The oldest generation CPython would collect now (Modules/gcmodule.c `gc_collect_generations`), or None.
    Counts: allocations less deallocations since the last young collection, then collections of the
    generation below since this one's last."""
    for generation in (2, 1, 0):
        if thresholds[generation] and counts[generation] > thresholds[generation]:
            return generation
    return None


def collect_due() -> int | None:
    """Collect the generation that is due, if any; call it only between bytecodes (Python code, not a hook
    that C code calls back)."""
    generation: Final = due_generation(gc.get_count(), gc.get_threshold())
    if generation is not None:
        gc.collect(generation)
    return generation


def needs_pacing(version: tuple[int, ...] = (sys.version_info.major, sys.version_info.minor)) -> bool:
    return version[:2] < SAFE_SINCE


def take_over_collection() -> None:
    """Automatic collection off; what start-up left is collected now and frozen, so that full collections
    later walk the requests' objects, not LiteLLM's imports."""
    gc.disable()
    gc.collect()
    gc.freeze()


async def pace(interval_s: float = INTERVAL_S) -> None:
    while True:
        await asyncio.sleep(interval_s)
        collect_due()


def start() -> asyncio.Task[None] | None:
    """Take collection over where the interpreter needs it; the caller keeps the task referenced."""
    if not needs_pacing():
        return None
    take_over_collection()
    logger.info("berth gc: automatic collection off, collected every %.0f ms between bytecodes (gh-148891)",
                INTERVAL_S * 1000)
    return asyncio.create_task(pace(), name="berth-gc-pacing")
