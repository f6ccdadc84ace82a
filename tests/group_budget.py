"""The suite's budget by xdist group (a stack profile or a module) and by worker, printed after `--durations`.

`--durations` names the slowest tests; what bounds a parallel run's wall time is the longest chain of groups one
worker ran, since a group never splits across workers. So the controller sums every report's duration (set-up,
call and tear-down) per group and per worker and prints the ten most expensive groups and each worker's total:
a group that outgrows the others shows in CI's own log before it becomes the run's critical path."""

from __future__ import annotations

from collections import defaultdict

import pytest

GROUPS_SHOWN = 10


class GroupBudget:
    def __init__(self) -> None:
        self.groups: defaultdict[str, float] = defaultdict(float)
        self.workers: defaultdict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under --dist loadgroup a node id ends in "@<group>"; in a plain run the module is the group.
        group = report.nodeid.rpartition("@")[2] if "@" in report.nodeid else report.nodeid.partition("::")[0]
        self.groups[group] += report.duration
        node = getattr(report, "node", None)  # xdist's worker controller, on the controller's side only
        gateway = getattr(node, "gateway", None)
        self.workers[str(getattr(gateway, "id", "main"))] += report.duration

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.groups:
            return
        terminalreporter.write_sep("=", f"slowest {GROUPS_SHOWN} groups (seconds of set-up, call and tear-down)")
        ranked = sorted(self.groups.items(), key=lambda pair: pair[1], reverse=True)
        for group, seconds in ranked[:GROUPS_SHOWN]:
            terminalreporter.write_line(f"{seconds:8.1f}s  {group}")
        busy = ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(self.workers.items()))
        terminalreporter.write_line(f"busy per worker: {busy}")


def pytest_configure(config: pytest.Config) -> None:
    # Only the process that prints the summary collects: the controller of an xdist run, or a plain run.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(GroupBudget(), "berth-group-budget")
