"""Catalog entries as data: `entry.yaml` parsed into frozen models, with typed, bounded parameters."""

from __future__ import annotations

import difflib
import re
import shlex
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from berth.bounded_parse import load_yaml
from berth.child_environment import user_environment_problem
from berth.errors import NotFoundError, UserInputError, shown
from berth.kinds import SERVICE_ENTRIES
from catalog.berth_flags import check_extra_env
from catalog.definition import HF_REPO, HF_REVISION, REVISION_HELP, SECRET_REF
from catalog.extra_args import check_engine_args
from catalog.extra_env import check_listed_env
from catalog.limits import check_name_length, check_value_length

CATALOG_DIR = Path(__file__).resolve().parent


class ParameterType(StrEnum):
    """The kinds of value a parameter takes; each has one parser below."""

    STRING = "string"  # free text, optionally constrained by `pattern`
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    CHOICE = "choice"  # one of `choices`
    SECRET = "secret"  # secret://user|group|organization/NAME
    HF_MODEL = "hf-model"  # hf://org/name[@revision][?options]
    ARGS = "args"  # a shell-quoted command-line fragment (ExtraArgs)
    ENV = "env"  # space-separated NAME=VALUE pairs, values shell-quoted (ExtraEnv)


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_EXAMPLE = "ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5'"


def _bound(number: float) -> str:
    """Bounds read as the user typed them: 1048576, not 1.04858e+06."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def split_args(name: str, text: str) -> list[str]:
    """Split a command-line fragment like a POSIX shell would (quotes group words). Bounded first:
    shlex.split is quadratic in its input."""
    check_value_length(name, text)
    try:
        return shlex.split(text)
    except ValueError as error:
        raise UserInputError(
            f"{name} cannot be split like a shell command line ({error}): {shown(text)!r}. Close the quote."
        ) from None


def split_env(name: str, text: str) -> dict[str, str]:
    """`'A=1 B="two words"'` → {"A": "1", "B": "two words"}."""
    pairs: dict[str, str] = {}
    for word in split_args(name, text):
        key, sep, value = word.partition("=")
        if not sep or not ENV_NAME.match(key):
            raise UserInputError(
                f"{name} must be space-separated NAME=VALUE pairs; '{shown(word)}' is not one. "
                f"Example: {ENV_EXAMPLE}."
            )
        pairs[key] = value
    return pairs


class Parameter(BaseModel):
    """One typed entry parameter: its kind, default, bounds (numbers), choices, pattern and help."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: ParameterType = ParameterType.STRING
    default: Any = None
    required: bool = False
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = Field(None, description="Regular expression a string value must match whole")
    example: str = Field("", description="A valid value, quoted in the error when `pattern` fails")
    user_only: bool = Field(False, description="Secrets: only secret://user/… (it becomes an env var)")
    secret_type: Literal["hf", "value"] | None = Field(
        None, description="Secrets: the type the secret must have; checked at submission")
    help: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Parameter:
        if self.type is ParameterType.CHOICE and not self.choices:
            raise ValueError(f"parameter {self.name} is a choice without choices")
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError(f"parameter {self.name} has max {self.max} below min {self.min}")
        if self.pattern is not None:
            re.compile(self.pattern)
        if self.secret_type is not None and self.type is not ParameterType.SECRET:
            raise ValueError(f"parameter {self.name} has a secret_type but is not a secret")
        return self

    def parse(self, raw: Any) -> Any:
        """Turn a user's value (a string from --values, or YAML-typed from a file) into a typed one."""
        kind = self.type
        if kind is ParameterType.ARGS and isinstance(raw, (list, tuple)):
            raw = shlex.join(str(word) for word in raw)  # a YAML list in --values-file
        if kind is ParameterType.ENV and isinstance(raw, dict):
            raw = " ".join(shlex.quote(f"{key}={value}") for key, value in raw.items())
        if isinstance(raw, (dict, list, tuple)):
            raise UserInputError(f"{self.name} takes a single value, not {type(raw).__name__} {shown(raw)}.")
        text = str(raw).strip() if not isinstance(raw, bool) else ("true" if raw else "false")
        check_value_length(self.name, text)
        quoted = shown(text)
        if kind in (ParameterType.INT, ParameterType.FLOAT):
            value: Any = self._number(raw, text, quoted)
        elif kind in (ParameterType.BOOL, ParameterType.CHOICE, ParameterType.SECRET):
            value = self._word(text, quoted)
        else:
            value = self._text(text, quoted)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.min is not None and value < self.min:
                raise UserInputError(f"{self.name}={value} is below its minimum {_bound(self.min)}.")
            if self.max is not None and value > self.max:
                raise UserInputError(f"{self.name}={value} is above its maximum {_bound(self.max)}.")
        return value

    def _number(self, raw: Any, text: str, quoted: str) -> int | float:
        kind = self.type
        value: int | float
        if kind is ParameterType.INT:
            if isinstance(raw, float) and not raw.is_integer():
                raise UserInputError(f"{self.name} must be a whole number, not '{quoted}'.")
            try:
                value = int(raw) if isinstance(raw, float) else int(text.replace("_", ""))
            except ValueError:
                raise UserInputError(f"{self.name} must be a whole number, not '{quoted}'.") from None
        elif kind is ParameterType.FLOAT:
            try:
                value = float(text)
            except ValueError:
                raise UserInputError(f"{self.name} must be a number, not '{quoted}'.") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise UserInputError(f"{self.name} must be a finite number, not '{quoted}'.")
        return value

    def _word(self, text: str, quoted: str) -> Any:
        kind = self.type
        value: Any
        if kind is ParameterType.BOOL:
            lowered = text.lower()
            if lowered not in {"true", "false", "1", "0", "yes", "no"}:
                raise UserInputError(f"{self.name} must be true or false, not '{quoted}'.")
            value = lowered in {"true", "1", "yes"}
        elif kind is ParameterType.CHOICE:
            if text not in self.choices:
                raise UserInputError(f"{self.name} must be one of {', '.join(self.choices)}, not '{quoted}'.")
            value = text
        elif kind is ParameterType.SECRET:
            if text and not SECRET_REF.match(text):
                raise UserInputError(
                    f"{self.name} must be a secret reference like secret://user/NAME, not '{quoted}'."
                )
            if text and self.user_only and not text.startswith("secret://user/"):
                raise UserInputError(
                    f"{self.name} must be a user-scoped secret reference like secret://user/NAME, not "
                    f"'{quoted}': group and organization secrets are refused for environment variables."
                )
            value = text or None
        return value

    def _text(self, text: str, quoted: str) -> str:
        kind = self.type
        if kind is ParameterType.HF_MODEL:
            parse_hf_uri(text, self.name)
        elif kind is ParameterType.ARGS:
            check_engine_args(split_args(self.name, text))
        elif kind is ParameterType.ENV:
            pairs = split_env(self.name, text)
            problem = user_environment_problem(pairs, self.name)
            if problem is not None:
                raise UserInputError(problem)
            check_extra_env(pairs)
            check_listed_env(pairs)
        else:
            if self.pattern is not None and not re.fullmatch(self.pattern, text):
                like = f" like {self.example}" if self.example else ""
                what = f" ({self.help})" if self.help else ""
                raise UserInputError(f"{self.name} must be a value{like}{what}, not '{quoted}'.")
        return text  # checked: a text value is kept as the user wrote it


def parse_hf_uri(text: str, parameter: str = "Model") -> tuple[str, str | None]:
    """`hf://org/name[@revision][?options]` → (repo, revision)."""
    example = "hf://openai/gpt-oss-20b or hf://org/name@revision"
    if not text.startswith("hf://"):
        raise UserInputError(f"{parameter} must be a Hugging Face URI such as {example}, not '{shown(text)}'.")
    body = text[len("hf://"):].split("?", 1)[0]
    repo, at, revision = body.partition("@")
    if not HF_REPO.fullmatch(repo):
        raise UserInputError(
            f"{parameter} must name a repository as org/name (e.g. {example}), not '{shown(text)}'."
        )
    if at and not HF_REVISION.match(revision):
        raise UserInputError(f"{parameter}'s revision '{shown(revision)}' is not {REVISION_HELP}.")
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
    kv_layers: int | None = Field(
        None, description="Layers with a full-length KV cache, when not all (hybrid, sliding-window)"
    )
    native_context: int | None = Field(
        None, description="Context the model was trained for, when `max_context` needs YaRN rope scaling"
    )

    @model_validator(mode="after")
    def _contexts(self) -> ModelFacts:
        if not self.default_context <= self.max_context:
            raise ValueError(f"{self.repo}: default_context {self.default_context} > max {self.max_context}")
        if self.kv_layers is not None and self.kv_layers > self.layers:
            raise ValueError(f"{self.repo}: kv_layers {self.kv_layers} exceeds layers {self.layers}")
        if self.native_context is not None and not self.native_context <= self.max_context:
            raise ValueError(f"{self.repo}: native_context {self.native_context} > max {self.max_context}")
        return self


# What an entry runs: a model (a vLLM replica pool: weights + replica), or the front a service entry runs
# (the registry's `service_entry` kinds, berth/kinds.py). The workflow definition's shape follows from it.
MODEL_ENTRY = "model"


class Entry(BaseModel):
    """One catalog entry: metadata, parameters and (for model entries) the model's facts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    slug: str
    description: str
    category: str = "ML_AND_AI"
    tags: tuple[str, ...] = ()
    kind: str = MODEL_ENTRY
    model: ModelFacts | None = None
    engine_args: tuple[str, ...] = Field((), description="vLLM flags this model needs, before ExtraArgs")
    weights_allow: tuple[str, ...] = Field((), description="Files to download; () = the usual set")
    parameters: tuple[Parameter, ...] = ()

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str) -> str:
        if kind != MODEL_ENTRY and kind not in SERVICE_ENTRIES:
            runs = ", ".join(sorted(SERVICE_ENTRIES))
            raise ValueError(f"kind {kind!r}: an entry runs a {MODEL_ENTRY} or one of {runs}")
        return kind

    @model_validator(mode="after")
    def _unique(self) -> Entry:
        names = [p.name for p in self.parameters]
        if len(names) != len(set(names)):
            raise ValueError(f"entry {self.name} declares a parameter twice")
        if self.model is not None:
            # The published maximum is the one bound users meet, so the parameter must carry it.
            context = next((p for p in self.parameters if p.name == "MaxContextSize"), None)
            if context is None or context.max != self.model.max_context:
                raise ValueError(f"entry {self.name}: MaxContextSize max must equal the model's max_context")
            if context.default != self.model.default_context:
                raise ValueError(f"entry {self.name}: MaxContextSize default must equal default_context")
        return self

    @property
    def directory(self) -> Path:
        return CATALOG_DIR / self.slug

    def parameter(self, name: str) -> Parameter:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        check_name_length("Parameter", name)  # before difflib, whose cost grows with the name
        names = [p.name for p in self.parameters]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        if not close:
            close = [n for n in names if n.lower() == name.lower()]
        hint = f" Did you mean {close[0]}?" if close else ""
        raise UserInputError(
            f"'{self.name}' has no parameter '{shown(name)}'.{hint} Its parameters: {', '.join(names)}."
        )


@lru_cache(maxsize=1)
def load_catalog() -> dict[str, Entry]:
    """Every entry under catalog/, keyed by display name."""
    entries: dict[str, Entry] = {}
    for path in sorted(CATALOG_DIR.glob("*/entry.yaml")):
        data = load_yaml(path.read_text(), str(path))
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
        shared_file = CATALOG_DIR / "_shared" / f"{shared}-parameters.yaml"
        parameters = [dict(p) for p in load_yaml(shared_file.read_text(), str(shared_file))]
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
    check_name_length("Entry", name)  # before difflib, whose cost grows with the name
    close = difflib.get_close_matches(name, list(catalog), n=1, cutoff=0.4)
    hint = f" Did you mean \"{close[0]}\"?" if close else ""
    raise NotFoundError(
        f"No catalog entry named \"{shown(name)}\".{hint} Run `berth workflow catalog list` to see the entries."
    )
