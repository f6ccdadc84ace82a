"""Submissions checked at once: two in all, one per user, so that one user's burst leaves the other slot to everyone
else; a wait is bounded and refused in one line; nothing is left behind by a finished, refused or cancelled one."""

from __future__ import annotations

import asyncio
from typing import Final

import pytest

from berth.errors import UnavailableError
from server.submission_slots import BUSY, SubmissionSlots


async def _hold(slots: SubmissionSlots, user: str, holding: asyncio.Event, release: asyncio.Event) -> None:
    async with slots.slot(user):
        holding.set()
        await release.wait()


async def _holding(slots: SubmissionSlots, user: str, release: asyncio.Event) -> asyncio.Task[None]:
    """A submission of `user`'s that holds its slot until `release`, once it holds it."""
    holding: Final = asyncio.Event()
    holder: Final = asyncio.create_task(_hold(slots, user, holding, release))
    await asyncio.wait_for(holding.wait(), timeout=5)
    return holder


async def test_a_users_burst_leaves_the_other_slot_to_another_user() -> None:
    slots: Final = SubmissionSlots(total=2, wait_s=5)
    release: Final = asyncio.Event()
    burst: Final = [asyncio.Event() for _ in range(5)]
    holders: Final = [asyncio.create_task(_hold(slots, "mallory", event, release)) for event in burst]
    await asyncio.wait_for(burst[0].wait(), timeout=5)
    await asyncio.sleep(0)  # let the rest of the burst queue up behind mallory's one slot
    assert sum(event.is_set() for event in burst) == 1

    alice: Final = asyncio.Event()
    alices: Final = asyncio.create_task(_hold(slots, "alice", alice, release))
    await asyncio.wait_for(alice.wait(), timeout=1)  # the second slot, ahead of mallory's four waiting
    assert sum(event.is_set() for event in burst) == 1

    release.set()
    await asyncio.wait_for(asyncio.gather(*holders, alices), timeout=5)
    assert all(event.is_set() for event in burst)
    assert slots.users() == 0


async def test_a_wait_past_its_bound_is_refused_in_one_line_and_leaves_nothing() -> None:
    slots: Final = SubmissionSlots(total=2, wait_s=0.2)
    release: Final = asyncio.Event()
    holder: Final = await _holding(slots, "bob", release)

    with pytest.raises(UnavailableError) as refused:
        async with slots.slot("bob"):
            pytest.fail("bob's second submission got a slot while his first held one")
    assert str(refused.value) == BUSY and "\n" not in BUSY
    assert refused.value.http_status == 503

    release.set()
    await asyncio.wait_for(holder, timeout=5)
    assert slots.users() == 0
    async with slots.slot("bob"), slots.slot("carol"):  # both slots free again
        assert slots.users() == 2


async def test_a_submission_cancelled_while_waiting_gives_back_its_place() -> None:
    slots: Final = SubmissionSlots(total=1, wait_s=5)
    release: Final = asyncio.Event()
    holder: Final = await _holding(slots, "dave", release)

    waiting: Final = asyncio.create_task(_hold(slots, "erin", asyncio.Event(), release))
    await asyncio.sleep(0)
    waiting.cancel()  # the client went away while erin's submission waited for the one slot
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert slots.users() == 1

    release.set()
    await asyncio.wait_for(holder, timeout=5)
    assert slots.users() == 0
    async with slots.slot("erin"):  # the slot is whole: nothing was taken by the cancelled wait
        pass
