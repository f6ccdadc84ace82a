"""Render an entry's Jinja template with validated values into a typed WorkflowDefinition."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml
from jinja2 import FileSystemLoader, StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import ValidationError

from berth.errors import UserInputError
from catalog.definition import WorkflowDefinition
from catalog.entry import CATALOG_DIR, Entry, parse_hf_uri
from catalog.memory import gpus_needed, memory_need


def _shlex_split(value: str | None) -> list[str]:
    try:
        return shlex.split(value or "")
    except ValueError as error:
        raise UserInputError(f"ExtraArgs cannot be split like a shell line ({error}): {value!r}.") from None


def _env_pairs(value: str | None) -> dict[str, str]:
    """`'A=1 B="two words"'` → {"A": "1", "B": "two words"} (space-separated NAME=VALUE pairs)."""
    pairs: dict[str, str] = {}
    try:
        words = shlex.split(value or "")
    except ValueError as error:
        raise UserInputError(f"ExtraEnv cannot be parsed ({error}): {value!r}.") from None
    for word in words:
        name, sep, val = word.partition("=")
        if not sep or not name:
            raise UserInputError(
                f"ExtraEnv must be space-separated NAME=VALUE pairs; '{word}' has no '='. "
                "Example: ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5'."
            )
        pairs[name] = val
    return pairs


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=FileSystemLoader(CATALOG_DIR), undefined=StrictUndefined, keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["tojson"] = lambda value: json.dumps(value)
    env.filters["shlex_split"] = _shlex_split
    env.filters["env_pairs"] = _env_pairs
    env.globals["hf_repo"] = lambda uri: parse_hf_uri(uri)[0]
    env.globals["hf_revision"] = lambda uri: parse_hf_uri(uri)[1]
    return env


_ENV = _environment()


def resolve_values(entry: Entry, raw: dict[str, Any]) -> dict[str, Any]:
    """Check every user value against the entry's parameters and fill in defaults."""
    values: dict[str, Any] = {}
    for name, value in raw.items():
        parameter = entry.parameter(name)  # raises with a suggestion for unknown names
        values[parameter.name] = parameter.parse(value)
    for parameter in entry.parameters:
        if parameter.name in values:
            continue
        if parameter.required:
            hint = f" ({parameter.help})" if parameter.help else ""
            raise UserInputError(
                f"'{entry.name}' needs {parameter.name}{hint}. Add --values {parameter.name}=…"
            )
        values[parameter.name] = parameter.default
    if entry.model is not None and values.get("GpusPerNode") is None:
        context = int(values.get("MaxContextSize") or entry.model.default_context)
        values["GpusPerNode"] = gpus_needed(memory_need(entry.model, context).total_gb)
    return values


def render(entry: Entry, values: dict[str, Any]) -> WorkflowDefinition:
    """Render with already-resolved values (see `resolve_values`)."""
    try:
        template = _ENV.get_template(f"{entry.slug}/workflow.yaml.j2")
        context: dict[str, Any] = dict(values)
        context["entry"] = entry
        context["model"] = entry.model
        if entry.model is not None:
            need = memory_need(entry.model, int(values.get("MaxContextSize") or entry.model.default_context))
            context["memory_total_gb"] = round(need.total_gb, 1)
        text = template.render(**context)
    except UserInputError:
        raise
    except TemplateError as error:
        raise RuntimeError(f"catalog entry {entry.name} failed to render: {error}") from error
    try:
        data = yaml.safe_load(text)
        return WorkflowDefinition.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors()
        )
        raise UserInputError(f"The values do not make a valid '{entry.name}' workflow: {problems}.") from None
