"""Bounded parsing of what a caller sends: JSON and YAML nested at most MAX_NESTING_DEPTH levels, checked before
the parser recurses (Python's parsers recurse once per level: a 100,000-deep body raised RecursionError, a 500 with
a traceback), and YAML without anchors or aliases (a 1 KB alias bomb expanded into 1.29 GB). Each refusal is one
line naming where; nothing of the document is quoted."""

from __future__ import annotations

import json
import operator
import re
from itertools import accumulate
from typing import Any

import yaml

from berth.errors import UserInputError

# No document Berth reads is nested a tenth as deep (an OpenAI request with JSON-schema tools: under 20 levels), and
# far below the interpreter's recursion limit of 1000, which the parsers and everything walking their result share.
MAX_NESTING_DEPTH = 64

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # an escaped character: an escaped quote does not end a string
_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'[]{}"')
_STEP = bytes.maketrans(b"[]{}", b"\x02\x00\x02\x00")  # an opener adds 2 and every bracket takes 1 away: ±1


class TooDeep(UserInputError):
    """A JSON or YAML document nested deeper than the bound (HTTP 400)."""


def json_depth_exceeds(data: bytes | str, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether `data`, read as JSON, opens more than `limit` arrays and objects inside one another at some point
    (unclosed ones count: the parser recurses into them before it finds the error), without recursing.

    Brackets inside strings do not count. Linear and in C but for the last step, which only a body with more than
    `limit` brackets outside its strings reaches: 12 ms for 100,000 levels, well under json.loads' own time on a
    large wide body."""
    raw = _utf8(data)
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    brackets = _STRING.sub(b"", raw.translate(None, _NOT_STRUCTURE)).replace(b'"', b"")
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    # The nesting after each bracket is a running sum of ±1; past a stray closer the parser has stopped already.
    steps = brackets.translate(_STEP)
    return max(map(operator.sub, accumulate(steps), range(1, len(steps) + 1))) > limit


def check_json_depth(data: bytes | str, where: str, limit: int = MAX_NESTING_DEPTH) -> None:
    """TooDeep when `data` nests deeper than `limit` (see json_depth_exceeds)."""
    if json_depth_exceeds(data, limit):
        raise TooDeep(f"{where} nests JSON deeper than {limit} levels; send a flatter document.")


def load_json(data: bytes | str, where: str, limit: int = MAX_NESTING_DEPTH) -> Any:
    """json.loads, bounded: TooDeep past `limit` levels; a document that is not JSON raises json's ValueError."""
    check_json_depth(data, where, limit)
    return json.loads(data)


def _utf8(data: bytes | str) -> bytes:
    """The document as UTF-8, as json.loads would decode it (it also reads UTF-16 and UTF-32 bytes, where one
    character spans several bytes and a byte-wise scan would miscount)."""
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(data)
    if encoding.startswith("utf-8"):
        return data
    return data.decode(encoding, "replace").encode("utf-8", "surrogatepass")


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """PyYAML's safe loader that refuses anchors and aliases and counts nesting as it composes."""

    def __init__(self, text: str, where: str, limit: int) -> None:
        super().__init__(text)
        self.where, self.limit, self.depth = where, limit, 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise UserInputError(f"YAML anchors and aliases (&name, *name, <<: *name) are not accepted in "
                                 f"{self.where} (line {line}); write each value out.")
        if not isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > self.limit:
                raise TooDeep(f"{self.where} nests YAML deeper than {self.limit} levels (line {line}).")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_yaml_all(text: str, where: str, limit: int = MAX_NESTING_DEPTH) -> list[Any]:
    """Every document of `text` (yaml.safe_load_all), bounded: UserInputError for an anchor or alias, TooDeep past
    `limit` levels; a text that is not YAML raises yaml.YAMLError, as safe_load_all does."""
    loader = _BoundedLoader(text, where, limit)
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def load_yaml(text: str, where: str, limit: int = MAX_NESTING_DEPTH) -> Any:
    """The one document of `text` (yaml.safe_load; None when empty), bounded as load_yaml_all."""
    loader = _BoundedLoader(text, where, limit)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
