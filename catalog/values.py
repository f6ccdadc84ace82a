"""Parse `--values K=V,K2=V2` (with quoting) and `--values-file FILE.yaml` into raw parameter values."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from berth.bounded_parse import load_yaml
from berth.errors import UserInputError, shown

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*=")


def parse_values(text: str) -> dict[str, str]:
    """Split on commas that start a new `Key=`; quotes ('…' or "…") protect commas and are removed.

    So `ExtraArgs=--a x,y,Nodes=2` keeps `--a x,y` whole, and
    `ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5'` keeps its `=` and spaces.
    """
    values: dict[str, str] = {}
    if not text.strip():
        return values
    parts: list[str] = []
    current: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == quote:
                quote = None
            else:
                current.append(char)
        elif char in "'\"":
            quote = char
        elif char == "," and _KEY.match(text, index + 1):
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    if quote:
        raise UserInputError(f"--values has an unclosed {quote} quote: {shown(text)!r}. Close it and try again.")
    parts.append("".join(current))
    for part in parts:
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            raise UserInputError(
                f"--values entry {shown(part)!r} is not KEY=VALUE. Use e.g. --values MaxContextSize=32768,Nodes=2."
            )
        if key in values:
            raise UserInputError(f"--values sets {key} twice. Give each parameter once.")
        values[key] = value
    return values


def load_values_file(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml(path.read_text(), f"--values-file {path}")
    except OSError as error:
        raise UserInputError(f"Cannot read --values-file {path}: {error.strerror}.") from None
    except yaml.YAMLError as error:
        raise UserInputError(f"--values-file {path} is not valid YAML: {error}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise UserInputError(f"--values-file {path} must be a mapping of parameter names to values.")
    return data
