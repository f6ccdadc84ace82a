"""The bases every contract derives from, and `wire()`: a response model back as the JSON it came in."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# A JSON number read back as it was sent: a bare `float` field would turn the 80 an agent reported into
# 80.0, and `-o json` would print other bytes than the API sent.
Number = int | float


class Payload(BaseModel):
    """A request or Temporal payload (workflows/payloads.py derives from it too)."""

    model_config = ConfigDict(frozen=True)


class Response(BaseModel):
    """A route's answer. `model_id` and friends are wire names: pydantic's `model_` namespace is freed."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())


class OpenResponse(Response):
    """An answer part that is open by nature (a node's GPU facts, a model's facts, a heartbeat detail):
    the fields Berth reads are typed, the rest are kept as they came."""

    model_config = ConfigDict(frozen=True, protected_namespaces=(), extra="allow")


def wire(value: Any) -> Any:
    """A response model (or a list of them) as the JSON the API sent: the fields it sent, by their wire
    names. Routes answer with `response_model_exclude_unset`, so a field the server left out stays out."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return value
