"""`berth apply -f FILE` and `berth diff -f FILE`: declare workflows in YAML; apply starts the absent ones,
rolls the running ones whose values differ, and leaves the rest; diff says what apply would do."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from berth.errors import BerthError, NotFoundError, UserInputError
from cli.common import Format, OutputOption, api_client, console, emit_json, fail

if TYPE_CHECKING:
    from berth.api_client import ApiClient
    from berth.contracts.workflows import WorkflowDescription
    from cli.apply_plan import ApplyDocument, Step

# Registered without a name: its commands are the root's (`berth apply`, `berth diff`).
app = typer.Typer()
FileOption = Annotated[Path, typer.Option("--file", "-f", help="YAML: one or more documents (---), each "
                                          "name, entry, values, scope?, strategy?")]
# `berth diff`'s exit codes, like `terraform plan -detailed-exitcode`.
NO_CHANGES, FAILED, CHANGES = 0, 1, 2


@app.command("apply")
def apply_file(file: FileOption, output: OutputOption = Format.TABLE) -> None:
    """Make the workflows a YAML file declares so (start, roll or leave each).

    Starts those absent (under their names), rolls those running with other values to a new revision of
    the changed values, leaves those equal. Documents apply in order; the first error stops it, saying
    which were applied."""
    documents = _read(file)
    done: list[dict[str, Any]] = []
    error = _run(lambda api: _apply_all(api, documents, done, output))
    if output is Format.JSON:
        emit_json(done)
    if error is not None:
        applied = ", ".join(d["name"] for d in done) or "none"
        raise fail(f"{error} (applied before it: {applied})")


@app.command("diff")
def diff_file(file: FileOption, output: OutputOption = Format.TABLE) -> None:
    """Show what `berth apply -f FILE` would do; changes nothing.

    Prints `+ create`, `~ update K: old → new` or `= unchanged` per document. Exit code (like `terraform
    plan -detailed-exitcode`): 0 when nothing would change, 2 when something would, 1 on an error."""
    from cli.apply_plan import Action, plan_line

    documents = _read(file)
    steps: list[Step] = []

    async def plan(api: ApiClient) -> None:
        for index, document in enumerate(documents, start=1):
            steps.append(await _plan(api, index, document))

    error = _run(plan)
    if error is not None:
        raise fail(error)
    if output is Format.JSON:
        emit_json([step.model_dump(mode="json") for step in steps])
    else:
        for step in steps:
            console.print(plan_line(step), highlight=False, soft_wrap=True)
    if any(step.action is not Action.UNCHANGED for step in steps):
        raise typer.Exit(CHANGES)


def _read(file: Path) -> list[ApplyDocument]:
    from cli.apply_plan import MAX_FILE_BYTES, parse_documents

    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise UserInputError(f"{file} is larger than {MAX_FILE_BYTES // 1024} KiB")
        return parse_documents(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise fail(f"cannot read {file}: {error.strerror or error}") from None
    except (UserInputError, UnicodeDecodeError) as error:
        raise fail(f"{file}: {error}") from None


def _run(work: Any) -> str | None:
    """Run the documents' API work; a Berth error is returned as its line (the work records what it did)."""
    import asyncio

    from berth.settings import ClientConfig

    config = ClientConfig.load()

    async def runner() -> None:
        async with api_client()(config.api_url, config.token, ca_file=config.ca_file) as api:
            await work(api)

    try:
        asyncio.run(runner())
    except BerthError as error:
        return str(error)
    return None


async def _plan(api: ApiClient, index: int, document: ApplyDocument) -> Step:
    from cli.apply_plan import plan_step

    workflow: WorkflowDescription | None
    try:
        workflow = await api.describe_workflow(document.name)
    except NotFoundError:
        workflow = None
    revisions = await api.workflow_revisions(document.name) if workflow and workflow.status == "running" else []
    return plan_step(index, document, workflow, revisions)


async def _apply_all(api: ApiClient, documents: list[ApplyDocument], done: list[dict[str, Any]],
                     output: Format) -> None:
    for index, document in enumerate(documents, start=1):
        try:
            outcome, line = await _apply_one(api, await _plan(api, index, document), document)
        except BerthError as error:
            message = str(error)
            prefix = f"document {index}"
            raise BerthError(message if message.startswith(prefix) else f"{prefix} ({document.name}): {message}") \
                from None
        done.append(outcome)
        if output is Format.TABLE:
            console.print(line, highlight=False, soft_wrap=True)


async def _apply_one(api: ApiClient, step: Step, document: ApplyDocument) -> tuple[dict[str, Any], str]:
    """Do the step; return its record for `-o json` and its line for people."""
    from berth.contracts.rollouts import WorkflowUpdateRequest
    from cli.apply_plan import Action, describe_changes

    record: dict[str, Any] = step.model_dump(mode="json")
    if step.action is Action.CREATE:
        started = await api.start_workflow(document.entry, document.desired_values(), name=document.name)
        record.update(url=started.url, endpoint_id=started.endpoint_id)
        return record, f"created {step.name} ({step.entry}): {started.url}"
    if step.action is Action.UNCHANGED:
        return record, f"unchanged {step.name} (revision {step.revision})"
    request = WorkflowUpdateRequest(values=step.changed_values(document), strategy=document.rollout_strategy())
    updated = await api.update_workflow(step.name, request)
    record.update(to_revision=updated.revision, url=updated.url)
    kind = document.rollout_strategy().kind.value
    return record, (f"updated {step.name}: revision {step.revision} → {updated.revision} ({kind}): "
                    f"{describe_changes(step.changes)}")
