"""Submissions checked at once in one API process: two in all, one per user, every wait bounded.

Checking and rendering a submission is CPU work in a thread, and each such thread takes the GIL in turn with the
event loop: six at once made a /healthz wait over a second (ci16), so two run at a time. With one queue, one
user's burst of submissions would hold everyone else's behind it; a user holds one of the two at a time, so
another user's submission waits for at most one. A wait longer than WAIT_S is refused in one line (503): the
caller retries, and the connection is not held for as long as a burst lasts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from berth.errors import UnavailableError

TOTAL = 2
WAIT_S = 30.0
BUSY = "The API is checking other submissions right now; try again in a few seconds."


@dataclass
class _UserTurn:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    present: int = 0  # this user's submissions holding or waiting for a slot: the entry goes at 0


class SubmissionSlots:
    def __init__(self, total: int = TOTAL, wait_s: float = WAIT_S) -> None:
        self._total = asyncio.Semaphore(total)
        self._users: dict[str, _UserTurn] = {}
        self.wait_s = wait_s

    @asynccontextmanager
    async def slot(self, user: str) -> AsyncIterator[None]:
        """Hold one of the slots for `user`'s submission; UnavailableError after waiting wait_s."""
        turn = self._users.setdefault(user, _UserTurn())
        turn.present += 1
        try:
            await self._acquire(turn.lock)
            try:
                yield
            finally:
                self._total.release()
                turn.lock.release()
        finally:
            turn.present -= 1
            if turn.present == 0:
                del self._users[user]

    def users(self) -> int:
        """Users with a submission holding or waiting for a slot (bounded by the connections they hold)."""
        return len(self._users)

    async def _acquire(self, lock: asyncio.Lock) -> None:
        try:
            async with asyncio.timeout(self.wait_s):
                await lock.acquire()
                try:
                    await self._total.acquire()
                except BaseException:
                    lock.release()
                    raise
        except TimeoutError:
            raise UnavailableError(BUSY) from None
