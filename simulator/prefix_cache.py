"""PrefixCache: the simulator's model of vLLM's automatic prefix caching. A prompt is cut into blocks of
BLOCK_TOKENS of the simulator's tokens (words), each block's hash chained over the blocks before it, as vLLM hashes
its KV blocks; an engine keeps the most recently used blocks up to its capacity, and a request's leading blocks
found there skip their prefill (simulator/engine.py)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

BLOCK_TOKENS = 16  # vLLM's default KV block size


def prompt_blocks(texts: Sequence[str]) -> tuple[bytes, ...]:
    """The chained hashes of the whole BLOCK_TOKENS-word blocks of the prompt's texts, in order."""
    words = [word for text in texts for word in text.split()]
    chain = hashlib.blake2b(digest_size=8)
    blocks = []
    for start in range(0, len(words) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        chain.update(" ".join(words[start:start + BLOCK_TOKENS]).encode() + b"\0")
        blocks.append(chain.copy().digest())
    return tuple(blocks)


class PrefixCache:
    """The blocks an engine holds, least recently used first; at most `capacity_blocks` (0: no caching)."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, blocks: Sequence[bytes]) -> int:
        """How many of the prompt's leading blocks were cached; then all of them are, as the most recent."""
        if self.capacity_blocks <= 0:
            return 0
        cached = self._blocks
        hits = 0
        while hits < len(blocks) and blocks[hits] in cached:
            hits += 1
        for block in blocks:
            cached[block] = None
            cached.move_to_end(block)
        while len(cached) > self.capacity_blocks:
            cached.popitem(last=False)
        return hits
