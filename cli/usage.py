"""`berth usage`: GPU-hours reserved and ready, requests and tokens by user, group, organization, workflow or endpoint
and by period (yours; an administrator's: everyone's, with the budgets), as a table, JSON or CSV; `berth usage budget
set|list|remove`: token and GPU-hour budgets per organization or group (docs/usage.md)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from berth.usage_csv import csv_lines, utc
from cli.audit import since_time
from cli.common import Format, OutputOption, Rows, answer, call, console, emit_json, table

if TYPE_CHECKING:
    from berth.contracts.usage import BudgetStatus, UsageFigures, UsageReport

app = typer.Typer(help="GPU-hours, requests and tokens used, by user, group, organization, workflow or endpoint.")
budget_app = typer.Typer(help="Token and GPU-hour budgets per organization or group (administrators).",
                         no_args_is_help=True)
app.add_typer(budget_app, name="budget")


class UsageFormat(str, Enum):
    """`berth usage -o` choices: a listing's two and CSV (a row per key and period, exact GPU-seconds)."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


class By(str, Enum):  # berth.contracts.usage.UsageBy's values, not imported: `--help` imports no contract
    USER = "user"
    GROUP = "group"
    ORG = "org"
    WORKFLOW = "workflow"
    ENDPOINT = "endpoint"


class Period(str, Enum):
    HOUR = "hour"
    DAY = "day"
    MONTH = "month"


@app.callback(invoke_without_command=True)
def usage(context: typer.Context,
          by: Annotated[By, typer.Option(help="Sum by user, group, org, workflow or endpoint")] = By.USER,
          since: Annotated[str | None, typer.Option(help="From a duration ago (7d) or an ISO time; default: the "
                                                         "start of this UTC month")] = None,
          until: Annotated[str | None, typer.Option(help="Until a duration ago or an ISO time; default: now")] = None,
          period: Annotated[Period | None, typer.Option(help="One row per key and UTC hour, day or month")] = None,
          output: Annotated[UsageFormat, typer.Option("--output", "-o", help="table, json or csv")]
          = UsageFormat.TABLE) -> None:
    """Show GPU-hours reserved and ready, requests and tokens: yours, or everyone's for an administrator."""
    if context.invoked_subcommand is not None:
        return
    from berth.api_usage import UsageApi
    from berth.contracts.usage import UsageBy, UsagePeriod

    start = since_time(since) if since is not None else None
    end = since_time(until, option="--until") if until is not None else None
    report = call(lambda api: api.usage(UsageBy(by.value), start, end, UsagePeriod(period.value) if period else None),
                  UsageApi)
    if output is UsageFormat.JSON:
        emit_json(report)
    elif output is UsageFormat.CSV:
        write_csv(report)
    else:
        _print(report)


def write_csv(report: UsageReport) -> None:
    """A row per key and period, the console's CSV download's columns (berth/usage_csv.py)."""
    for line in csv_lines(report):
        sys.stdout.write(line)


def _cells(figures: UsageFigures) -> dict[str, object]:
    return {"reserved": f"{figures.gpu_seconds_reserved / 3600:.3f}",
            "ready": f"{figures.gpu_seconds_ready / 3600:.3f}", "requests": figures.requests,
            "failures": figures.failures, "tokens_in": figures.tokens_in, "tokens_out": figures.tokens_out}


FIGURE_COLUMNS = [("reserved", "GPU-H RESERVED"), ("ready", "GPU-H READY"), ("requests", "REQUESTS"),
                  ("failures", "FAILED"), ("tokens_in", "TOKENS IN"), ("tokens_out", "TOKENS OUT")]


def _print(report: UsageReport) -> None:
    console.print(f"Usage from {utc(report.since)} to {utc(report.until)} by {report.by.value}. {report.note}",
                  highlight=False)
    rows: Rows = [{"key": row.key or "(no one)", "period": utc(row.period_start), **_cells(row)} for row in report.rows]
    period = [("period", report.period.value.upper())] if report.period else []
    table(rows, [("key", report.by.value.upper()), *period, *FIGURE_COLUMNS])
    console.print("Total: " + ", ".join(f"{heading.lower()} {value}" for (key, heading), value in
                                        zip(FIGURE_COLUMNS, _cells(report.total).values(), strict=True)),
                  highlight=False)
    if report.budgets:
        table(budget_rows(report.budgets), BUDGET_COLUMNS, title="Budgets")


BUDGET_COLUMNS = [("scope", "SCOPE"), ("name", "NAME"), ("period", "PERIOD"), ("tokens", "TOKENS USED/BUDGET"),
                  ("gpu_hours", "GPU-H USED/BUDGET"), ("exceeded", "EXCEEDED")]


def budget_rows(statuses: list[BudgetStatus]) -> Rows:
    """Each budget's use against it in its current period: `used/budget` ("-": no budget for that figure)."""
    return [{"scope": s.budget.scope, "name": s.budget.name, "period": f"{s.budget.period} from {utc(s.period_start)}",
             "tokens": f"{s.tokens_used}/{_or_dash(s.budget.tokens)}",
             "gpu_hours": f"{float(s.gpu_hours_used):.3f}/{_or_dash(s.budget.gpu_hours)}",
             "exceeded": ", ".join(s.exceeded) or "no"} for s in statuses]


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


Scope = Annotated[str, typer.Argument(help="org or group")]
Name = Annotated[str, typer.Argument(help="The organization's or group's name")]
BudgetPeriod = Annotated[Period, typer.Option(help="The budget's UTC period: day or month")]


@budget_app.command("set")
def budget_set(scope: Scope, name: Name, period: BudgetPeriod = Period.MONTH,
               tokens: Annotated[int | None, typer.Option(min=1, help="Tokens in + out per period")] = None,
               gpu_hours: Annotated[float | None, typer.Option(min=0.001, help="GPU-hours reserved per period")]
               = None) -> None:
    """Set (or replace) an organization's or group's budget for a UTC day or month."""
    from berth.api_usage import UsageApi
    from berth.contracts.usage import UsageBudget

    budget = UsageBudget.model_validate({"scope": scope, "name": name, "period": period.value, "tokens": tokens,
                                         "gpu_hours": gpu_hours})
    call(lambda api: api.set_usage_budget(budget), UsageApi)
    console.print(f"Budget set: {scope} {name}, per {period.value}.", highlight=False)


@budget_app.command("list")
def budget_list(output: OutputOption = Format.TABLE) -> None:
    """Every budget against its use in its current period."""
    from berth.api_usage import UsageApi

    statuses = answer(output, lambda api: api.usage_budgets(), UsageApi)
    if statuses is not None:
        table(budget_rows(statuses), BUDGET_COLUMNS)


@budget_app.command("remove")
def budget_remove(scope: Scope, name: Name, period: BudgetPeriod = Period.MONTH) -> None:
    """Remove an organization's or group's budget for a period."""
    from berth.api_usage import UsageApi

    call(lambda api: api.remove_usage_budget(scope, name, period.value), UsageApi)
    console.print(f"Budget removed: {scope} {name}, per {period.value}.", highlight=False)
