"""`berth workflow update|revisions|drain` and `berth workflow rollout …`: roll a replica pool to a new
revision, list its revisions, steer its rollout, drain it with a grace (issue 17)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from berth.contracts.choices import RolloutAction, RolloutKind
from cli.common import Format, OutputOption, answer, call, console, emit_json, fail, listing

if TYPE_CHECKING:
    from berth.contracts.rollouts import Rollout, RolloutStrategy, WorkflowRevision

rollout_app = typer.Typer(help="Steer a workflow's rollout to a new revision.", no_args_is_help=True)


def _steps(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise fail(f"--steps takes percentages separated by commas, e.g. 5,20,50,100, not '{text}'.") from None


def _strategy(kind: RolloutKind, options: dict[str, Any]) -> RolloutStrategy:
    from pydantic import ValidationError

    from berth.contracts.rollouts import RolloutStrategy

    given = {name: value for name, value in options.items() if value is not None}
    try:
        return RolloutStrategy(kind=kind, **given)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "strategy"
        message = first["msg"].removeprefix("Value error, ")
        option = _OPTIONS.get(field, field)
        raise fail(message.replace(f"{field}:", f"{option}:", 1) if message.startswith(f"{field}:")
                   else f"{option}: {message}.") from None


# RolloutStrategy's fields as the options that set them, for a refusal to name what the user typed.
_OPTIONS = {"max_surge": "--max-surge", "max_unavailable": "--max-unavailable", "min_ready_s": "--min-ready-seconds",
            "steps": "--steps", "step_hold_s": "--step-hold-seconds", "max_error_rate": "--max-error-rate",
            "max_ttft_ms": "--max-ttft-ms", "rollback_window_s": "--rollback-window-seconds"}


def workflow_update(
    workflow_id: str,
    values: Annotated[str, typer.Option("--values", help="K=V,K2=V2: the values that change")],
    strategy: Annotated[RolloutKind, typer.Option("--strategy", help="rolling, canary or blue-green")]
    = RolloutKind.ROLLING,
    max_surge: Annotated[int | None, typer.Option("--max-surge", help="rolling: new copies above the size")] = None,
    max_unavailable: Annotated[int | None, typer.Option("--max-unavailable",
                                                        help="rolling: copies below the size")] = None,
    min_ready_seconds: Annotated[float | None, typer.Option("--min-ready-seconds",
                                                            help="a new copy counts once ready this long")] = None,
    steps: Annotated[str | None, typer.Option("--steps", help="canary: traffic percentages, e.g. 5,20,50,100")]
    = None,
    step_hold_seconds: Annotated[float | None, typer.Option("--step-hold-seconds", help="canary: each step held")]
    = None,
    max_error_rate: Annotated[float | None, typer.Option("--max-error-rate", help="canary: pause above this")]
    = None,
    max_ttft_ms: Annotated[float | None, typer.Option("--max-ttft-ms", help="canary: pause above this mean TTFT")]
    = None,
    rollback_window_seconds: Annotated[float | None, typer.Option(
        "--rollback-window-seconds", help="blue-green: keep the old set this long")] = None,
    wait: Annotated[bool, typer.Option(help="Follow the rollout until it completes, pauses or rolls back")] = False,
    output: OutputOption = Format.TABLE,
) -> None:
    """Roll a replica pool to new values (a new revision); its endpoint and URL stay."""
    from berth.contracts.rollouts import WorkflowUpdateRequest
    from berth.errors import UserInputError
    from catalog.values import parse_values

    try:
        changed = parse_values(values)
    except UserInputError as error:
        raise fail(str(error)) from None
    chosen = _strategy(strategy, {"max_surge": max_surge, "max_unavailable": max_unavailable,
                                  "min_ready_s": min_ready_seconds, "steps": _steps(steps),
                                  "step_hold_s": step_hold_seconds, "max_error_rate": max_error_rate,
                                  "max_ttft_ms": max_ttft_ms, "rollback_window_s": rollback_window_seconds})
    request = WorkflowUpdateRequest(values=changed, strategy=chosen)
    updated = call(lambda api: api.update_workflow(workflow_id, request))
    if output is Format.JSON and not wait:
        emit_json(updated)
        return
    console.print(f"{workflow_id}: {updated.message}", highlight=False)
    if wait and updated.rollout is not None:
        _follow(workflow_id, updated.rollout)


def _follow(workflow_id: str, rollout: Rollout, interval_s: float = 1.0) -> None:
    """Print each phase or message change until the rollout settles; exit 1 if it paused or rolled back."""
    from berth.contracts.rollouts import RolloutPhase

    settled = RolloutPhase.finished() | {RolloutPhase.PAUSED}  # done, or a person must decide
    shown: tuple[str, str] | None = None
    while True:
        now = (rollout.phase.value, rollout.message)
        if now != shown:
            detail = f" — {rollout.message}" if rollout.message else ""
            console.print(f"{workflow_id}: {rollout.phase.value}{detail}", highlight=False)
            shown = now
        if rollout.phase in settled:
            break
        time.sleep(interval_s)
        rollout = call(lambda api: api.rollout_status(workflow_id))
    if rollout.phase is RolloutPhase.PAUSED:
        raise fail(f"{workflow_id}'s rollout paused ({rollout.paused_reason or 'by hand'}); "
                   f"`berth workflow rollout resume|promote|rollback {workflow_id}`.")
    if rollout.phase is RolloutPhase.ROLLED_BACK:
        raise fail(f"{workflow_id} rolled back to revision {rollout.from_revision}"
                   + (f" ({rollout.paused_reason})" if rollout.paused_reason else "") + ".")


def _revision_rows(revisions: list[WorkflowRevision]) -> list[dict[str, Any]]:
    return [{"revision": r.revision, "state": r.state, "by": r.by,
             "at": datetime.fromtimestamp(r.at).strftime("%Y-%m-%d %H:%M"), "strategy": r.strategy,
             "values": ",".join(f"{k}={v}" for k, v in sorted(r.values.items()))} for r in revisions]


def workflow_revisions(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
    """List a workflow's revisions and which one serves."""
    listing(output, lambda api: api.workflow_revisions(workflow_id),
            [("revision", "REVISION"), ("state", "STATE"), ("by", "BY"), ("at", "AT"), ("strategy", "STRATEGY"),
             ("values", "VALUES")], rows=_revision_rows)


def workflow_drain(workflow_id: str,
                   grace_seconds: Annotated[float, typer.Option("--grace-seconds",
                                                                help="In-flight requests get this long")] = 30.0,
                   output: OutputOption = Format.TABLE) -> None:
    """Scale a pool to its minimum, letting in-flight requests finish first."""
    result = answer(output, lambda api: api.drain_workflow(workflow_id, grace_seconds))
    if result is None:
        return  # printed as JSON
    console.print(f"{workflow_id}: draining, desired copies {result.previous} → {result.desired}.")


def _show(rollout: Rollout, workflow_id: str) -> None:
    traffic = ", ".join(f"r{rev} {pct}%" for rev, pct in sorted(rollout.traffic.items())) or "by copy count"
    console.print(f"{workflow_id}: revision {rollout.from_revision} → {rollout.to_revision} "
                  f"({rollout.strategy.kind.value}), {rollout.phase.value}; traffic {traffic}", highlight=False)
    for label, text in (("paused", rollout.paused_reason), ("now", rollout.message), ("by", rollout.by)):
        if text:
            console.print(f"  {label}: {text}", highlight=False)


@rollout_app.command("status")
def rollout_status(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
    """A workflow's current or last rollout: its phase, traffic split and what it waits for."""
    rollout = answer(output, lambda api: api.rollout_status(workflow_id))
    if rollout is not None:
        _show(rollout, workflow_id)


def _command(action: RolloutAction, help_text: str) -> None:
    def steer(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
        from berth.contracts.rollouts import RolloutCommand

        rollout = answer(output, lambda api: api.rollout_command(workflow_id, RolloutCommand(action=action)))
        if rollout is not None:
            _show(rollout, workflow_id)

    steer.__doc__ = help_text
    rollout_app.command(action.value)(steer)


_command(RolloutAction.PAUSE, "Hold a rollout where it is (a canary stops shifting traffic).")
_command(RolloutAction.RESUME, "Continue a paused rollout from its phase.")
_command(RolloutAction.PROMOTE, "Finish a rollout now: all traffic and the full size on the new revision.")
_command(RolloutAction.ROLLBACK, "Restore the previous revision's traffic and stop the new set.")


def register(app: typer.Typer) -> None:
    """Add the commands to `berth workflow`."""
    app.command("update")(workflow_update)
    app.command("revisions")(workflow_revisions)
    app.command("drain")(workflow_drain)
    app.add_typer(rollout_app, name="rollout")
