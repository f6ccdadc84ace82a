"""`berth model add|list|describe|status|materialize|verify|remove|jobs` and `berth model cache evict`: models
registered once (an hf:// repository or a pre-staged directory), materialized once per digest by a model
job, verified, and served by workflows as model://NAME."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from berth.contracts.choices import ModelFormat, ModelScope
from berth.units import binary_size as size
from cli.common import Format, OutputOption, answer, console, emit_json, listing
from cli.follow import watch_model

if TYPE_CHECKING:
    from berth.contracts.model_registry import JobStarted, ModelRecord

app = typer.Typer(help="Models: register, materialize, verify and remove them; evict the model cache.",
                  no_args_is_help=True)
cache_app = typer.Typer(help="The managed model cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
COLUMNS = [("name", "NAME"), ("scope", "SCOPE"), ("owner_key", "OWNER"), ("source", "SOURCE"), ("state", "STATE"),
           ("digest", "DIGEST"), ("size", "SIZE"), ("cached", "CACHED"), ("used", "USED BY")]
JOB_COLUMNS = [("job_id", "JOB"), ("model", "MODEL"), ("kind", "KIND"), ("state", "STATE"),
               ("retries", "RETRIES"), ("message", "MESSAGE")]
NameArgument = Annotated[str, typer.Argument(help="The model's name (`berth model list`)")]
WatchOption = Annotated[bool, typer.Option("--watch", help="Follow the job until the model is Ready or Failed")]


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"



def _row(record: ModelRecord) -> dict[str, Any]:
    return {**record.model_dump(mode="json"), "digest": (record.digest or "-")[:12], "size": size(record.size_bytes),
            "used": record.referenced_by}


@app.command("add")
def model_add(
    name: Annotated[str, typer.Argument(help="A name, unique in its scope (letters, digits, '.', '_', '-')")],
    source: Annotated[str, typer.Option("--source", help="hf://org/name or hf://org/name@revision, or an "
                                        "absolute path under an allowed model dir")],
    require_checksum: Annotated[bool, typer.Option("--require-checksum", help="Refuse files the source "
                                                   "publishes no checksum for")] = False,
    signature: Annotated[str | None, typer.Option(help="HMAC-SHA256 hex of the digest under the signing key")] = None,
    license_: Annotated[str | None, typer.Option("--license", help="The model's license")] = None,
    residency: Annotated[str | None, typer.Option(help="Where its bytes may be kept and served")] = None,
    format_: Annotated[ModelFormat, typer.Option("--format", help="safetensors or gguf")] = ModelFormat.SAFETENSORS,
    scope: Annotated[ModelScope, typer.Option(help="user, group or organization")] = ModelScope.USER,
    group: Annotated[str | None, typer.Option(help="For --scope group: which of your groups")] = None,
    hf_token_secret: Annotated[str | None, typer.Option(help="secret://…/NAME of type hf, for gated or "
                                                        "private repositories")] = None,
    include: Annotated[list[str] | None, typer.Option("--include", help="Only the repository's files matching "
                                                      "this glob (repeatable), e.g. '*.safetensors'")] = None,
    exclude: Annotated[list[str] | None, typer.Option("--exclude", help="Leave out the files matching this glob "
                                                      "(repeatable), e.g. 'original/*'")] = None,
    output: OutputOption = Format.TABLE,
) -> None:
    """Register a model; no bytes move until `berth model materialize` (or a workflow's first use)."""
    from berth.contracts.model_registry import ModelCreate

    fields = {"name": name, "source": source, "require_checksum": require_checksum, "signature": signature,
              "license": license_, "residency": residency, "format": format_, "scope": scope, "group": group,
              "hf_token_secret": hf_token_secret, "allow_patterns": include, "ignore_patterns": exclude}
    request = ModelCreate.model_validate({k: v for k, v in fields.items() if v is not None})
    record = answer(output, lambda api: api.add_model(request))
    if record is not None:
        console.print(f"Registered model {record.name} ({record.scope.value} {record.owner_key}) from "
                      f"{record.source}. Materialize it with `berth model materialize {record.name}`.",
                      highlight=False)


@app.command("list")
def model_list(output: OutputOption = Format.TABLE) -> None:
    """List the models you can use: yours, your groups', your organization's."""
    listing(output, lambda api: api.models(), COLUMNS, lambda records: [_row(r) for r in records])


def _describe(record: ModelRecord) -> None:
    progress = record.progress
    for label, value in (
            ("Name", record.name), ("ID", record.id), ("Scope", f"{record.scope.value} ({record.owner_key})"),
            ("Registered by", record.owner), ("Source", record.source), ("Commit", record.commit or "-"),
            ("Digest", record.digest or "-"), ("State", record.state.value), ("Message", record.message or "-"),
            ("Retries", record.retries), ("Job", record.job_id or "-"),
            ("Progress", f"{size(progress.bytes_done)} of {size(progress.bytes_total)}" if progress else "-"),
            ("Size", f"{size(record.size_bytes)} in {record.files} files ({record.safetensors_files} safetensors)"),
            ("Format", record.format.value), ("Verified", "yes" if record.verified else "no"),
            ("Require checksum", "yes" if record.require_checksum else "no"),
            ("Signed", "yes" if record.signed else "no"), ("License", record.license or "-"),
            ("Residency", record.residency or "-"), ("Cached", "yes" if record.cached else "no"),
            ("Served by", ", ".join(record.referenced_by) or "-"), ("Created", _when(record.created_at)),
            ("Materialized", _when(record.materialized_at)), ("Last verified", _when(record.verified_at)),
            ("Last used", _when(record.last_used_at))):
        console.print(f"{label + ':':<18}{value}", highlight=False)


@app.command("describe")
def model_describe(name: NameArgument, output: OutputOption = Format.TABLE) -> None:
    """Show a model: its source, digest, state, verification and who serves it."""
    record = answer(output, lambda api: api.describe_model(name))
    if record is not None:
        _describe(record)


@app.command("status")
def model_status(name: NameArgument, watch: WatchOption = False, output: OutputOption = Format.TABLE) -> None:
    """A model's job state and progress; --watch follows it (exit 1 when it fails)."""
    if watch:
        final = watch_model(name, quiet=output is Format.JSON)
        if output is Format.JSON:
            emit_json(final)
        return
    record = answer(output, lambda api: api.model_status(name))
    if record is not None:
        _describe(record)


def _job(name: str, kind: str, watch: bool, output: Format) -> None:
    def start(api: Any) -> Any:
        return api.materialize_model(name) if kind == "materialize" else api.verify_model(name)

    started: JobStarted | None = answer(output, start)
    if started is not None:
        how = "Joined the running" if started.joined else "Recorded a"
        console.print(f"{how} {kind} job {started.job_id} for model {started.model} ({started.state.value}).",
                      highlight=False)
    if watch:
        watch_model(name, quiet=output is Format.JSON)


@app.command("materialize")
def model_materialize(name: NameArgument, watch: WatchOption = False, output: OutputOption = Format.TABLE) -> None:
    """Record a job that downloads, verifies and scans the model (or join the running one)."""
    _job(name, "materialize", watch, output)


@app.command("verify")
def model_verify(name: NameArgument, watch: WatchOption = False, output: OutputOption = Format.TABLE) -> None:
    """Record a job that recomputes the cached bytes' digest and scans them again."""
    _job(name, "verify", watch, output)


@app.command("remove")
def model_remove(name: NameArgument, output: OutputOption = Format.TABLE) -> None:
    """Remove a model you registered (refused while a running workflow serves it)."""
    record = answer(output, lambda api: api.remove_model(name))
    if record is not None:
        console.print(f"Removed model {record.name}.", highlight=False)


@app.command("jobs")
def model_jobs(output: OutputOption = Format.TABLE) -> None:
    """The current (or last) job of each model you can see."""
    listing(output, lambda api: api.model_jobs(), JOB_COLUMNS)


@cache_app.command("evict")
def cache_evict(budget_bytes: Annotated[int | None, typer.Option(help="Keep the cache under this many bytes "
                                                                 "(default: the cluster's model_cache_bytes)")] = None,
                output: OutputOption = Format.TABLE) -> None:
    """Delete the oldest digests no running workflow serves until the cache is under the budget."""
    from berth.contracts.model_registry import EvictRequest

    request = EvictRequest.model_validate({} if budget_bytes is None else {"budget_bytes": budget_bytes})
    result = answer(output, lambda api: api.evict_model_cache(request))
    if result is None:
        return
    for evicted in result.evicted:
        console.print(f"Evicted {evicted.digest[:12]} ({size(evicted.bytes)}; {', '.join(evicted.models) or '-'})",
                      highlight=False)
    console.print(f"Cache: {size(result.before_bytes)} → {size(result.after_bytes)} (budget "
                  f"{size(result.budget_bytes)}); kept {len(result.kept_referenced)} served digest(s).",
                  highlight=False)
