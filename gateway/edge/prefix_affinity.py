"""prefix_affinity (issue 36): a request goes to the copy that most recently served the longest prefix its prompt
shares with an earlier one, where vLLM's prefix cache still holds that prefix's KV blocks and skips its prefill;
when that copy is overloaded (policy_kit.overloaded) or out of the choice (stale, failed, draining), the load
policy picks instead. The prompt reaches the policy as chained block hashes (`prompt_blocks`) on the request's
PromptKey; the prompt itself is never kept, only 8-byte hashes, in an index with a hard bound."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from gateway.edge.policy_kit import SPILL_MARGIN, Policy, overloaded
from gateway.edge.replica import Replica

BLOCK_CHARS = 128  # ~32 tokens: two of vLLM's 16-token cache blocks
MAX_BLOCKS = 256  # of a prompt, hashed and indexed: its first 32 KiB; hashing more would cost every request
MAX_ENTRIES = 16_384  # block hashes one endpoint remembers (~2 MB): the least recently used go first


def prompt_blocks(text: str) -> tuple[bytes, ...]:
    """The hash of each whole BLOCK_CHARS block of `text` (at most MAX_BLOCKS), chained: block k's hash covers
    blocks 0..k, so equal hashes mean equal prefixes, not merely an equal block somewhere."""
    chain = hashlib.blake2b(digest_size=8)
    blocks = []
    for start in range(0, min(len(text), BLOCK_CHARS * MAX_BLOCKS) - BLOCK_CHARS + 1, BLOCK_CHARS):
        chain.update(text[start:start + BLOCK_CHARS].encode("utf-8", "surrogatepass"))
        blocks.append(chain.copy().digest())
    return tuple(blocks)


class PrefixIndex:
    """Block hash -> the copy that last served a prompt with that prefix; an LRU of at most `max_entries`."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._copies: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._copies)

    def longest(self, blocks: Sequence[bytes], among: set[str]) -> str | None:
        """The copy (one of `among`) indexed for the longest of the prompt's prefixes; None: none is."""
        copies = self._copies
        for block in reversed(blocks):
            copy_id = copies.get(block)
            if copy_id is not None and copy_id in among:
                return copy_id
        return None

    def served(self, blocks: Sequence[bytes], copy_id: str) -> None:
        """`copy_id` now holds these prefixes: the most recent, so the last evicted."""
        copies = self._copies
        for block in blocks:
            copies[block] = copy_id
            copies.move_to_end(block)
        while len(copies) > self.max_entries:
            copies.popitem(last=False)


class PrefixAffinity:
    """The copy of the longest shared prefix while it is not overloaded; else, and for a request without a prompt
    (or an `x-session-id`, which wins), the fallback load policy (least_queue in the registry)."""

    name = "prefix_affinity"
    reads_prompt = True

    def __init__(self, fallback: Policy, max_entries: int = MAX_ENTRIES, margin: float = SPILL_MARGIN) -> None:
        self.fallback = fallback
        self.margin = margin
        self.index = PrefixIndex(max_entries)

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return self.fallback.choose(candidates)

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return self.fallback.best(candidates)

    def route(self, candidates: Sequence[Replica], blocks: Sequence[bytes]) -> Replica:
        """The copy for a prompt of these block hashes; it is then indexed as the one that served them."""
        preferred = self.index.longest(blocks, {r.copy_id for r in candidates})
        chosen = next((r for r in candidates if r.copy_id == preferred), None)
        if chosen is None or overloaded(chosen, candidates, self.margin):
            chosen = self.fallback.choose(candidates)
        self.index.served(blocks, chosen.copy_id)
        return chosen
