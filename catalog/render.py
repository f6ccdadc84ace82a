"""Render an entry's Jinja template with validated values into a typed WorkflowDefinition."""

from __future__ import annotations

import json
import math
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import ValidationError

from berth.bounded_parse import load_yaml
from berth.errors import UserInputError
from catalog.definition import WorkflowDefinition
from catalog.entry import CATALOG_DIR, Entry, parse_hf_uri, split_args, split_env
from catalog.memory import gpus_needed, memory_need


def _refuse(message: str) -> None:
    """Templates call `refuse(…)` for cross-parameter rules; the message reaches the user as is."""
    raise UserInputError(message)


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=FileSystemLoader(CATALOG_DIR), undefined=StrictUndefined, keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["tojson"] = lambda value: json.dumps(value)
    env.filters["shlex_split"] = lambda value: split_args("ExtraArgs", value or "")
    env.filters["env_pairs"] = lambda value: split_env("ExtraEnv", value or "")
    env.globals["refuse"] = _refuse
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
    given = set(values)
    for parameter in entry.parameters:
        if parameter.name in values:
            continue
        if parameter.required:
            hint = f" ({parameter.help})" if parameter.help else ""
            raise UserInputError(
                f"'{entry.name}' needs {parameter.name}{hint}. Add --values {parameter.name}=…"
            )
        values[parameter.name] = parameter.default
    _check_replica_bounds(values, given)
    if entry.model is not None:
        _check_model(entry, values)
        if values.get("GpusPerNode") is None:
            # The documents' rule: as many 80 GB-class GPUs per node as the node's share needs.
            context = int(values.get("MaxContextSize") or entry.model.default_context)
            nodes = max(int(values.get("Nodes") or 1), 1)
            values["GpusPerNode"] = gpus_needed(memory_need(entry.model, context).total_gb / nodes)
    return values


def _check_replica_bounds(values: dict[str, Any], given: set[str]) -> None:
    """MaxReplicas below MinReplicas, both given, is a contradiction: refuse it rather than silently run
    MinReplicas copies. With MaxReplicas left at its default the pool grows to MinReplicas (the template's
    max), so `MinReplicas=3` alone still means three copies."""
    if {"MinReplicas", "MaxReplicas"} <= given and values["MaxReplicas"] < values["MinReplicas"]:
        raise UserInputError(
            f"MaxReplicas ({values['MaxReplicas']}) is below MinReplicas ({values['MinReplicas']}): "
            "raise MaxReplicas or lower MinReplicas."
        )


def _check_model(entry: Entry, values: dict[str, Any]) -> None:
    """A per-model entry's facts (memory, context) hold only for its own repository."""
    assert entry.model is not None
    uri = values.get("Model")
    if not uri:
        return
    repo, _revision = parse_hf_uri(str(uri))
    if repo.casefold() != entry.model.repo.casefold():
        raise UserInputError(
            f"'{entry.name}' serves {entry.model.repo}; Model={uri} names another repository. Pin a "
            f"revision with Model=hf://{entry.model.repo}@REVISION, or start the vLLM entry for other models."
        )


def render(entry: Entry, values: dict[str, Any]) -> WorkflowDefinition:
    """Render with already-resolved values (see `resolve_values`)."""
    try:
        template = _ENV.get_template(f"{entry.slug}/workflow.yaml.j2")
        context: dict[str, Any] = dict(values)
        context["entry"] = entry
        context["model"] = entry.model
        if entry.model is not None:
            max_model_len = int(values.get("MaxContextSize") or entry.model.default_context)
            need = memory_need(entry.model, max_model_len)
            context["memory_total_gb"] = round(need.total_gb, 1)
            native = entry.model.native_context
            # Beyond the trained context the model needs YaRN, scaled just enough (Qwen's guidance).
            context["yarn_factor"] = (math.ceil(max_model_len / native * 100) / 100
                                      if native and max_model_len > native else None)
        text = template.render(**context)
    except UserInputError:
        raise
    except TemplateError as error:
        raise RuntimeError(f"catalog entry {entry.name} failed to render: {error}") from error
    try:
        data = load_yaml(text, f"The rendered '{entry.name}' workflow")
        return WorkflowDefinition.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" if issue["loc"] else issue["msg"]
            for issue in error.errors()
        )
        raise UserInputError(f"The values do not make a valid '{entry.name}' workflow: {problems}.") from None
