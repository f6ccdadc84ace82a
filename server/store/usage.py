"""Usage in the store, summed in SQL: GPU-seconds reserved and ready from the copy spans (server/store/copy_spans.py),
requests and tokens from the audit tallies (server/store/audit.py), per key (user, group, organization, workflow or
endpoint) and per period (server/usage_periods.py lists them). Hours and days are buckets computed in the GROUP BY
(whole minutes of the tallies; each span walked over the buckets it touches); months, and the whole window, join the
periods as a VALUES table. docs/performance.md ("Operations at scale") has the figures.

Attribution. GPUs: a span's owner and organization as they were at its reservation; by group, each group the owner is
in now. Requests: the audit record's user (the caller the endpoint proxy named); by organization, that user's now; by
group, each of their groups now; by workflow, the workflow whose endpoint was called. A user in two groups counts in
both groups' rows, once in the total. Usage attributed to no one (a request without a named caller, a copy of a
workflow the store does not hold) has the key "".

Requests are counted by the minute (a tally is one minute's records): a window or period counts the minutes that
start within it, so windows on whole minutes are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Float,
    Select,
    SQLColumnExpression,
    and_,
    case,
    column,
    func,
    literal,
    literal_column,
    select,
    values,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import CTE, FunctionElement

from berth.contracts.usage import UsageBy, UsageFigures, UsagePeriod, UsageRow
from berth.errors import UserInputError
from server.store.tables import AuditTallyRow, CopySpanRow, MembershipRow, UserRow, WorkflowRow
from server.usage_periods import Span, periods

GpuSums = tuple[float, float]  # GPU-seconds reserved, ready
RequestSums = tuple[int, int, int, int, int]  # requests, successes, failures, tokens in, tokens out
Cell = tuple[str, float]  # a row's key and its period's start
NO_REQUESTS: RequestSums = (0, 0, 0, 0, 0)
Expression = SQLColumnExpression[Any]
MINUTES = {UsagePeriod.HOUR: 60, UsagePeriod.DAY: 1440}  # a bucket's width in the tallies' minutes
MAX_ROWS = 100_000  # an answer's rows at most (~20 MB of JSON): a larger one is refused, not built
AnySelect = Select[*tuple[Any, ...]]


class UsageQuery(NamedTuple):
    by: UsageBy
    window: Span
    period: UsagePeriod | None = None
    user: str | None = None  # only this user's usage (a caller who is not an administrator); None: everyone's


class UsageStore:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session

    def rows(self, query: UsageQuery, now: float) -> list[UsageRow]:
        """One row per key and period with any usage, ordered by period, then key."""
        spans = periods(query.window, query.period)
        table = _periods(spans)
        with self._session() as s:
            spans_summed = (_gpu_buckets(query, now) if query.period in MINUTES else _gpu_query(query, table, now)
                            ).limit(MAX_ROWS + 1)
            # A bucket of whole hours or days starts on its boundary; the window's first is clipped to it.
            gpus = {(key, max(float(start), query.window.start)): (float(reserved), float(ready))
                    for key, start, reserved, ready in s.execute(spans_summed)}
            asked: dict[Cell, RequestSums] = {}
            for key, bucket, *sums in s.execute(_request_query(query, table).limit(MAX_ROWS + 1)):
                cell = (key, max(float(bucket), query.window.start))
                asked[cell] = (int(sums[0]), int(sums[1]), int(sums[2]), int(sums[3]), int(sums[4]))
        if len(gpus.keys() | asked.keys()) > MAX_ROWS:
            raise UserInputError(f"That answer would hold more than {MAX_ROWS:,} rows: ask by a coarser key or "
                                 "--period, or over a shorter window.")
        ends = {span.start: span.end for span in spans}
        return [_row(key, start, ends[start], gpus.get((key, start), (0.0, 0.0)), asked.get((key, start), NO_REQUESTS))
                for key, start in sorted(gpus.keys() | asked.keys(), key=lambda cell: (cell[1], cell[0]))]

    def report(self, query: UsageQuery, now: float) -> tuple[list[UsageRow], UsageFigures]:
        """The rows and the total. Every key but group attributes each span and request once: its total is the sum
        of its rows, without a second pass over the tallies."""
        rows = self.rows(query, now)
        if query.by is UsageBy.GROUP:
            return rows, self.total(query, now)
        sums = [sum(getattr(row, name) for row in rows) for name in UsageFigures.model_fields]
        return rows, UsageFigures(**dict(zip(UsageFigures.model_fields, sums, strict=True)))

    def total(self, query: UsageQuery, now: float) -> UsageFigures:
        """The window's figures, each counted once whatever the rows' attribution (a user in two groups once)."""
        whole = _periods([query.window])
        everyone = query._replace(by=UsageBy.ENDPOINT, period=None)  # every request and span has one endpoint
        with self._session() as s:
            reserved, ready = s.execute(_totalled(_gpu_query(everyone, whole, now), 2)).one()
            sums = s.execute(_totalled(_request_query(everyone, whole), 5)).one()
        return _figures((float(reserved or 0), float(ready or 0)), tuple(int(v or 0) for v in sums))  # type: ignore[arg-type]


def _periods(spans: list[Span]) -> CTE:
    """The periods as a table: (start, finish) in seconds, (first_minute, end_minute) in the tallies' minutes."""
    rows = [(span.start, span.end, *span.minutes) for span in spans]
    return values(column("start", Float), column("finish", Float), column("first_minute", BigInteger),
                  column("end_minute", BigInteger), name="periods").data(rows).cte("periods")


def _earlier(a: Expression, b: Expression) -> Expression:
    return case((a < b, a), else_=b)  # LEAST on PostgreSQL, min() on SQLite: CASE reads the same on both


def _later(a: Expression, b: Expression) -> Expression:
    return case((a > b, a), else_=b)


def _overlap(start: Expression, end: Expression, table: CTE) -> Expression:
    """Seconds of [start, end) within the period's [start, finish), 0 when they do not meet."""
    low, high = _later(start, table.c.start), _earlier(end, table.c.finish)
    return case((high > low, high - low), else_=0.0)


def _gpu_query(query: UsageQuery, table: CTE, now: float) -> AnySelect:
    """(key, period start, GPU-seconds reserved, GPU-seconds ready) per key and period."""
    end = func.coalesce(CopySpanRow.released_at, literal(now, Float))
    ready_from = func.coalesce(CopySpanRow.ready_at, end)  # never ready: an empty interval
    key = _span_key(query)
    statement = (select(key.label("key"), table.c.start,
                        func.sum(CopySpanRow.gpus * _overlap(CopySpanRow.reserved_at, end, table)).label("reserved"),
                        func.sum(CopySpanRow.gpus * _overlap(ready_from, end, table)).label("ready"))
                 .select_from(CopySpanRow)
                 .join(table, and_(CopySpanRow.reserved_at < table.c.finish, end > table.c.start)))
    if query.by is UsageBy.GROUP:
        statement = statement.join(MembershipRow, MembershipRow.user == CopySpanRow.owner)
    if query.user is not None:
        statement = statement.where(CopySpanRow.owner == query.user)
    return statement.group_by(key, table.c.start)


def _span_key(query: UsageQuery) -> Expression:
    return {UsageBy.USER: CopySpanRow.owner, UsageBy.ORG: CopySpanRow.org, UsageBy.WORKFLOW: CopySpanRow.workflow_id,
            UsageBy.ENDPOINT: CopySpanRow.endpoint_id, UsageBy.GROUP: MembershipRow.group}[query.by]


def _gpu_buckets(query: UsageQuery, now: float) -> AnySelect:
    """As _gpu_query, by hour or day: each span clipped to the window and walked bucket by bucket (a recursive CTE)
    over the buckets it touches only. Joining every span to every period cost spans × periods comparisons: 5,000
    spans by the hour over 30 days, 3.6 million and most of a second (bench/operations.py)."""
    width: Expression = literal_column(str(MINUTES[query.period] * 60 if query.period else 60))  # seconds
    since, until = literal(query.window.start, Float), literal(query.window.end, Float)
    end = func.coalesce(CopySpanRow.released_at, literal(now, Float))
    low, high = _later(CopySpanRow.reserved_at, since), _earlier(end, until)
    start: AnySelect = (select(_span_key(query).label("key"), CopySpanRow.gpus.label("gpus"), low.label("low"),
                    _later(func.coalesce(CopySpanRow.ready_at, end), since).label("ready_low"), high.label("high"),
                    (_Floor(low / width) * width).label("bucket"))
             .select_from(CopySpanRow).where(CopySpanRow.reserved_at < until, end > since))
    if query.by is UsageBy.GROUP:
        start = start.join(MembershipRow, MembershipRow.user == CopySpanRow.owner)
    if query.user is not None:
        start = start.where(CopySpanRow.owner == query.user)
    walked = start.cte("walked", recursive=True)
    walked = walked.union_all(select(walked.c.key, walked.c.gpus, walked.c.low, walked.c.ready_low, walked.c.high,
                                     walked.c.bucket + width).where(walked.c.bucket + width < walked.c.high))
    finish = walked.c.bucket + width

    def seconds(begin: Expression) -> Expression:
        low_here, high_here = _later(begin, walked.c.bucket), _earlier(walked.c.high, finish)
        return case((high_here > low_here, high_here - low_here), else_=0.0)
    return (select(walked.c.key, walked.c.bucket, func.sum(walked.c.gpus * seconds(walked.c.low)).label("reserved"),
                   func.sum(walked.c.gpus * seconds(walked.c.ready_low)).label("ready"))
            .group_by(walked.c.key, walked.c.bucket))


class _Floor(FunctionElement[float]):
    """floor(x) for x ≥ 0: PostgreSQL's floor(); SQLite's CAST AS INTEGER (the same for x ≥ 0: its floor() needs
    the math functions SQLite may be built without)."""

    type = Float()
    inherit_cache = True


@compiles(_Floor)
def _floor(element: _Floor, compiler: SQLCompiler, **kw: Any) -> str:
    return f"floor({compiler.process(element.clauses, **kw)})"


@compiles(_Floor, "sqlite")
def _floor_sqlite(element: _Floor, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


def _request_query(query: UsageQuery, table: CTE) -> AnySelect:
    """(key, period start, requests, successes, failures, tokens in, tokens out) per key and period: the tallies
    summed per user or endpoint first (one pass over them), then attributed (a join over those few sums). Hours and
    days are buckets of whole minutes (their start, in seconds: the caller clips the first to the window); months
    join the periods' table."""
    by_endpoint = query.by in (UsageBy.WORKFLOW, UsageBy.ENDPOINT)
    first: Expression = AuditTallyRow.endpoint_id if by_endpoint else func.coalesce(AuditTallyRow.user, "")
    sums = [func.sum(AuditTallyRow.attempts), func.sum(AuditTallyRow.successes), func.sum(AuditTallyRow.failures),
            func.sum(AuditTallyRow.tokens_in), func.sum(AuditTallyRow.tokens_out)]
    first_minute, end_minute = query.window.minutes
    bucket: Expression
    if query.period is UsagePeriod.MONTH:
        bucket = table.c.start
        inner = select(first.label("key"), bucket.label("start")).select_from(AuditTallyRow).join(
            table, and_(AuditTallyRow.minute >= table.c.first_minute, AuditTallyRow.minute < table.c.end_minute))
    else:  # the whole window is one bucket (a constant, grouped by nothing); hours and days are whole minutes
        width: Expression | None = literal_column(str(MINUTES[query.period])) if query.period else None
        bucket = (AuditTallyRow.minute // width) * width * literal_column("60") if width is not None else \
            literal_column(repr(float(query.window.start)))
        inner = (select(first.label("key"), bucket.label("start")).select_from(AuditTallyRow)
                 .where(AuditTallyRow.minute >= first_minute, AuditTallyRow.minute < end_minute))
    inner = inner.add_columns(*(s.label(f"v{i}") for i, s in enumerate(sums)))
    if query.user is not None:
        inner = inner.where(AuditTallyRow.user == query.user)
    summed = inner.group_by(first, *([bucket] if query.period else [])).subquery("summed")
    values_of = [summed.c[f"v{i}"] for i in range(len(sums))]
    if query.by in (UsageBy.USER, UsageBy.ENDPOINT):
        return select(summed.c.key, summed.c.start, *values_of)
    key: Expression
    if query.by is UsageBy.WORKFLOW:
        key = func.coalesce(WorkflowRow.id, "")
        joined = summed.outerjoin(WorkflowRow, WorkflowRow.endpoint_id == summed.c.key)
    elif query.by is UsageBy.ORG:
        key = func.coalesce(UserRow.org, "")
        joined = summed.outerjoin(UserRow, UserRow.name == summed.c.key)
    else:
        key = MembershipRow.group
        joined = summed.join(MembershipRow, MembershipRow.user == summed.c.key)
    return (select(key.label("key"), summed.c.start, *(func.sum(v).label(v.name) for v in values_of))
            .select_from(joined)
            .group_by(key, summed.c.start))


def _totalled(statement: AnySelect, figures: int) -> AnySelect:
    """The sums of a per-key query's figures over every key and period."""
    inner = statement.subquery("per_key")
    return select(*(func.sum(inner.c[name]) for name in list(inner.c.keys())[2:2 + figures]))


def _figures(gpus: GpuSums, asked: RequestSums) -> UsageFigures:
    return UsageFigures(gpu_seconds_reserved=gpus[0], gpu_seconds_ready=gpus[1], requests=asked[0],
                        successes=asked[1], failures=asked[2], tokens_in=asked[3], tokens_out=asked[4])


def _row(key: str, start: float, end: float, gpus: GpuSums, asked: RequestSums) -> UsageRow:
    # Built once, not from a UsageFigures: an hourly month by endpoint is ~15,000 rows.
    return UsageRow(key=key, period_start=start, period_end=end, gpu_seconds_reserved=gpus[0],
                    gpu_seconds_ready=gpus[1], requests=asked[0], successes=asked[1], failures=asked[2],
                    tokens_in=asked[3], tokens_out=asked[4])
