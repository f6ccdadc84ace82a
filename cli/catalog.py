"""`berth workflow catalog list|describe|start` (also `berth catalog …`): the entries, what they need, and
starting one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import Format, OutputOption, answer, call, console, emit_json, fail, listing, table, wire
from cli.follow import watch as follow

if TYPE_CHECKING:
    from berth.contracts.catalog import EntryDetail, ParameterView

app = typer.Typer(help="The workflow catalog.", no_args_is_help=True)


@app.command("list")
def catalog_list(category: Annotated[str | None, typer.Option(help="e.g. ML_AND_AI")] = None,
                 tag: Annotated[str | None, typer.Option(help="e.g. LLM")] = None,
                 output: OutputOption = Format.TABLE) -> None:
    """List catalog entries."""
    listing(output, lambda api: api.catalog(category, tag),
            [("name", "NAME"), ("category", "CATEGORY"), ("tags", "TAGS"), ("description", "DESCRIPTION")])


@app.command("describe")
def catalog_describe(name: str, output: OutputOption = Format.TABLE) -> None:
    """Show an entry's parameters and the GPU memory it needs per context size."""
    entry = answer(output, lambda api: api.catalog_entry(name))
    if entry is None:
        return  # printed as JSON
    console.print(f"[bold]{entry.name}[/] — {entry.description}")
    parameters = [{**wire(p), "range": _parameter_range(p), "default": _parameter_default(p, entry)}
                  for p in entry.parameters]
    table(parameters, [("name", "PARAMETER"), ("type", "TYPE"), ("default", "DEFAULT"), ("range", "RANGE"),
                       ("help", "HELP")])
    if entry.memory:
        rows = [{**wire(m), "context": f"{m.context:,}{' (default)' if m.default else ''}"}
                for m in entry.memory]
        table(rows, [("context", "CONTEXT"), ("weights_gb", "WEIGHTS GB"), ("kv_cache_gb", "KV CACHE GB"),
                     ("overhead_gb", "OVERHEAD GB"), ("total_gb", "TOTAL GB"), ("gpus_80gb", "80 GB GPUS")],
              title="GPU memory needed (within 90% of each GPU)")
        default = next(m for m in entry.memory if m.default)
        gpus = entry.default_gpus_per_node if "default_gpus_per_node" in entry.model_fields_set else default.gpus_80gb
        where = f"GpusPerNode={gpus}" if gpus else "GpusPerNode=0: the CPU engine"
        console.print(f"At its default context it needs {default.total_gb} GB: {where} by default; lower "
                      "MaxContextSize to need less.", highlight=False)


def _parameter_default(parameter: ParameterView, entry: EntryDetail) -> Any:
    if parameter.required:
        return "(required)"
    memory_default = entry.default_gpus_per_node
    if parameter.name == "GpusPerNode" and parameter.default is None and memory_default is not None:
        # What the memory model picks at the default context.
        return f"auto ({memory_default})"
    return parameter.default


def _parameter_range(parameter: ParameterView) -> str:
    """Bounds or choices as one short cell: `256..131072`, `≥ 0`, `user|group`."""
    if parameter.choices:
        return "|".join(parameter.choices)
    low, high = parameter.min, parameter.max

    def number(value: float) -> str:
        return str(int(value)) if float(value).is_integer() else f"{value:g}"

    if low is not None and high is not None:
        return f"{number(low)}..{number(high)}"
    if low is not None:
        return f"≥ {number(low)}"
    if high is not None:
        return f"≤ {number(high)}"
    return ""


@app.command("start")
def catalog_start(
    name: str,
    values: Annotated[str | None, typer.Option("--values", help="K=V,K2=V2 (quote values with commas)")] = None,
    values_file: Annotated[Path | None, typer.Option("--values-file", help="YAML mapping of values")] = None,
    watch: Annotated[bool, typer.Option(help="Follow the workflow until it is ready")] = False,
    workflow_name: Annotated[str | None, typer.Option(
        "--name", help="The workflow's ID, a-z 0-9 - (default: slug-random)")] = None,
    output: OutputOption = Format.TABLE,
) -> None:
    """Start a catalog entry; prints the workflow ID."""
    from berth.errors import UserInputError
    from catalog.values import load_values_file, parse_values

    try:
        merged: dict[str, Any] = load_values_file(values_file) if values_file else {}
        for key, value in parse_values(values or "").items():
            merged[key] = value
    except UserInputError as error:
        raise fail(str(error)) from None
    started = call(lambda api: api.start_workflow(name, merged, workflow_name))
    if output is Format.JSON and not watch:
        emit_json(started)
        return
    console.print(started.id, highlight=False)
    if watch:
        follow(started.id)
