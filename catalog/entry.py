"""Catalog entries as data: `entry.yaml` parsed into frozen models, with typed, bounded parameters."""

from __future__ import annotations

import difflib
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.errors import NotFoundError, UserInputError
from catalog.definition import HF_REPO, SECRET_REF

CATALOG_DIR = Path(__file__).resolve().parent


class ParameterType(str, Enum):
    """The kinds of value a parameter takes; each has one parser below."""

    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    CHOICE = "choice"  # one of `choices`
    SECRET = "secret"  # secret://user|group|organization/NAME
    HF_MODEL = "hf-model"  # hf://org/name[@revision][?options]


class Parameter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: ParameterType = ParameterType.STRING
    default: Any = None
    required: bool = False
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""

    def parse(self, raw: Any) -> Any:
        """Turn a user's value (a string from --values, or YAML-typed from a file) into a typed one."""
        text = str(raw).strip() if not isinstance(raw, bool) else ("true" if raw else "false")
        kind = self.type
        if kind is ParameterType.INT:
            try:
                value: Any = int(text)
            except ValueError:
                raise UserInputError(f"{self.name} must be a whole number, not '{text}'.") from None
        elif kind is ParameterType.FLOAT:
            try:
                value = float(text)
            except ValueError:
                raise UserInputError(f"{self.name} must be a number, not '{text}'.") from None
        elif kind is ParameterType.BOOL:
            lowered = text.lower()
            if lowered not in {"true", "false", "1", "0", "yes", "no"}:
                raise UserInputError(f"{self.name} must be true or false, not '{text}'.")
            value = lowered in {"true", "1", "yes"}
        elif kind is ParameterType.CHOICE:
            if text not in self.choices:
                raise UserInputError(f"{self.name} must be one of {', '.join(self.choices)}, not '{text}'.")
            value = text
        elif kind is ParameterType.SECRET:
            if text and not SECRET_REF.match(text):
                raise UserInputError(
                    f"{self.name} must be a secret reference like secret://user/NAME, not '{text}'."
                )
            value = text or None
        elif kind is ParameterType.HF_MODEL:
            parse_hf_uri(text, self.name)
            value = text
        else:
            value = text
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.min is not None and value < self.min:
                raise UserInputError(f"{self.name}={value} is below its minimum {self.min:g}.")
            if self.max is not None and value > self.max:
                raise UserInputError(f"{self.name}={value} is above its maximum {self.max:g}.")
        return value


def parse_hf_uri(text: str, parameter: str = "Model") -> tuple[str, str | None]:
    """`hf://org/name[@revision][?options]` → (repo, revision)."""
    example = "hf://openai/gpt-oss-20b or hf://org/name@revision"
    if not text.startswith("hf://"):
        raise UserInputError(f"{parameter} must be a Hugging Face URI such as {example}, not '{text}'.")
    body = text[len("hf://"):].split("?", 1)[0]
    repo, _, revision = body.partition("@")
    if not HF_REPO.match(repo):
        raise UserInputError(f"{parameter} must name a repository as org/name (e.g. {example}), not '{text}'.")
    return repo, revision or None


class ModelFacts(BaseModel):
    """A model's published facts, from its model card and config.json (source in entry.yaml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: str
    parameters_b: float = Field(gt=0, description="Total parameters, billions")
    weights_gb: float = Field(gt=0, description="Size of the weights on disk/GPU, GB (1e9 bytes)")
    weight_dtype: str
    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    kv_dtype_bytes: int = Field(2, gt=0)
    default_context: int = Field(gt=0)
    max_context: int = Field(gt=0)
    moe: bool = False
    gated: bool = False
    kv_layers: int | None = Field(None, description="Layers with a full KV cache, when not all (hybrid models)")


class Entry(BaseModel):
    """One catalog entry: metadata, parameters and (for model entries) the model's facts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    slug: str
    description: str
    category: str = "ML_AND_AI"
    tags: tuple[str, ...] = ()
    kind: str = "model"
    model: ModelFacts | None = None
    parameters: tuple[Parameter, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Entry:
        names = [p.name for p in self.parameters]
        if len(names) != len(set(names)):
            raise ValueError(f"entry {self.name} declares a parameter twice")
        return self

    @property
    def directory(self) -> Path:
        return CATALOG_DIR / self.slug

    def parameter(self, name: str) -> Parameter:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        names = [p.name for p in self.parameters]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        if not close:
            close = [n for n in names if n.lower() == name.lower()]
        hint = f" Did you mean {close[0]}?" if close else ""
        raise UserInputError(
            f"'{self.name}' has no parameter '{name}'.{hint} Its parameters: {', '.join(names)}."
        )


@lru_cache(maxsize=1)
def load_catalog() -> dict[str, Entry]:
    """Every entry under catalog/, keyed by display name."""
    entries: dict[str, Entry] = {}
    for path in sorted(CATALOG_DIR.glob("*/entry.yaml")):
        data = yaml.safe_load(path.read_text())
        data.setdefault("slug", path.parent.name)
        data["parameters"] = _expand_parameters(data)
        entry = Entry.model_validate(data)
        entries[entry.name] = entry
    return entries


def _expand_parameters(data: dict[str, Any]) -> list[dict[str, Any]]:
    """`parameters_from: NAME` pulls `_shared/NAME-parameters.yaml`; `overrides` patches fields;
    the entry's own `parameters` come last (and may add new ones)."""
    parameters: list[dict[str, Any]] = []
    shared = data.pop("parameters_from", None)
    overrides: dict[str, dict[str, Any]] = data.pop("overrides", None) or {}
    if shared:
        parameters = [dict(p) for p in yaml.safe_load((CATALOG_DIR / "_shared" / f"{shared}-parameters.yaml").read_text())]
    known = {p["name"] for p in parameters}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"entry {data.get('name')} overrides unknown parameters {sorted(unknown)}")
    for parameter in parameters:
        parameter.update(overrides.get(parameter["name"], {}))
    return parameters + list(data.get("parameters") or [])


def find_entry(name: str) -> Entry:
    catalog = load_catalog()
    if name in catalog:
        return catalog[name]
    by_folded = {key.casefold(): entry for key, entry in catalog.items()}
    by_folded.update({entry.slug.casefold(): entry for entry in catalog.values()})
    if name.casefold() in by_folded:
        return by_folded[name.casefold()]
    close = difflib.get_close_matches(name, list(catalog), n=1, cutoff=0.4)
    hint = f" Did you mean \"{close[0]}\"?" if close else ""
    raise NotFoundError(
        f"No catalog entry named \"{name}\".{hint} Run `berth workflow catalog list` to see the entries."
    )
