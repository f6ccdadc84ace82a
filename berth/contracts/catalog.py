"""Catalog answers: an entry as `catalog list` shows it, and one entry with its parameters and memory table."""

from __future__ import annotations

from typing import Any

from berth.contracts.base import Number, OpenResponse, Response


class EntrySummary(Response):
    name: str
    description: str
    category: str
    tags: list[str]
    kind: str


class ParameterView(OpenResponse):
    """One parameter of an entry (catalog.entry.Parameter as JSON)."""

    name: str
    type: str = "string"
    default: Any = None
    required: bool = False
    min: Number | None = None
    max: Number | None = None
    choices: list[str] = []
    pattern: str | None = None
    example: str = ""
    user_only: bool = False
    secret_type: str | None = None
    help: str = ""


class MemoryRow(Response):
    """What a model needs at one context length (catalog.memory.MemoryRow as JSON)."""

    context: int
    weights_gb: Number
    kv_cache_gb: Number
    overhead_gb: Number
    total_gb: Number
    gpus_80gb: int
    default: bool


class EntryDetail(EntrySummary):
    """`model`, `memory` and `default_gpus_per_node` are there for model entries only."""

    parameters: list[ParameterView]
    model: dict[str, Any] | None = None  # catalog.definition's model facts, open: the catalog owns them
    memory: list[MemoryRow] | None = None
    default_gpus_per_node: int | None = None
