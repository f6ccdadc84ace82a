"""A scripted usage scenario (tests/server/store/test_usage.py, tests/server/test_usage_routes.py, tests/cli/): copies
reserved, made ready and released at known times on a scripted clock, and audited requests at known minutes, with
the exact figures they must add up to. T0 is 2026-01-01 00:00 UTC; the window is [T0, T0 + 2 h), "now" its end.

Copies (GPUs: reserved from → ready from → released):
- wf-a (alice; acme; team-a, team-b), 2 GPUs: 00:10 → 00:20 → 01:10, then placed again at 01:20, never ready, held;
- wf-b (bob; acme; team-b), 1 GPU: 00:00 → 00:05 → 00:30;
- wf-c (carol; beta; team-c), 4 GPUs: 23:00 the day before → 23:10 → 00:15 (only its last 15 minutes count).
Requests (user → endpoint, minute, outcome, tokens in/out), plus two outside the window:
- alice → ep-a 00:01 ok 10/20, 01:01 ok 1/2; bob → ep-a 00:02 failed 5/0, → ep-b 01:01 ok 7/8;
- carol → ep-c 01:06 ok 100/200; no one named (a public caller) → ep-c 01:08 ok 3/4.
"""

from __future__ import annotations

from typing import Any

from berth.contracts import AuditBatch, AuditPhase, AuditRecord, ReserveRequest
from node.inventory import simulated_gpus
from server.store.database import Store
from server.store.tables import WorkflowRow

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0
SINCE, UNTIL = T0, T0 + 2 * HOUR
NOW = UNTIL
USERS = {"alice": ("acme", ["team-a", "team-b"]), "bob": ("acme", ["team-b"]), "carol": ("beta", ["team-c"])}
WORKFLOWS = {"wf-a": "alice", "wf-b": "bob", "wf-c": "carol"}
REQUESTS: list[tuple[str | None, str, float, int, int, int]] = [  # user, endpoint, at, status, tokens in, out
    ("alice", "ep-a", T0 + 60, 200, 10, 20), ("alice", "ep-a", T0 + HOUR + 60, 200, 1, 2),
    ("bob", "ep-a", T0 + 120, 502, 5, 0), ("bob", "ep-b", T0 + HOUR + 70, 200, 7, 8),
    ("carol", "ep-c", T0 + HOUR + 360, 200, 100, 200), (None, "ep-c", T0 + HOUR + 480, 200, 3, 4),
    ("alice", "ep-a", UNTIL, 200, 1000, 1000), ("alice", "ep-a", SINCE - 60, 200, 1000, 1000),  # outside
]

# Per key: GPU-seconds reserved, ready, requests, successes, failures, tokens in, tokens out (the whole window).
BY_USER = {"alice": (12000, 6000, 2, 2, 0, 11, 22), "bob": (1800, 1500, 2, 1, 1, 12, 8),
           "carol": (3600, 3600, 1, 1, 0, 100, 200), "": (0, 0, 1, 1, 0, 3, 4)}
BY_ORG = {"acme": (13800, 7500, 4, 3, 1, 23, 30), "beta": (3600, 3600, 1, 1, 0, 100, 200), "": (0, 0, 1, 1, 0, 3, 4)}
BY_GROUP = {"team-a": (12000, 6000, 2, 2, 0, 11, 22), "team-b": (13800, 7500, 4, 3, 1, 23, 30),
            "team-c": (3600, 3600, 1, 1, 0, 100, 200)}
BY_WORKFLOW = {"wf-a": (12000, 6000, 3, 2, 1, 16, 22), "wf-b": (1800, 1500, 1, 1, 0, 7, 8),
               "wf-c": (3600, 3600, 2, 2, 0, 103, 204)}
BY_ENDPOINT = {"ep-a": (12000, 6000, 3, 2, 1, 16, 22), "ep-b": (1800, 1500, 1, 1, 0, 7, 8),
               "ep-c": (3600, 3600, 2, 2, 0, 103, 204)}
TOTAL = (17400, 11100, 6, 5, 1, 126, 234)
# By user and hour: (period start, key) → figures.
BY_USER_HOURLY = {(T0, "alice"): (6000, 4800, 1, 1, 0, 10, 20), (T0, "bob"): (1800, 1500, 1, 0, 1, 5, 0),
                  (T0, "carol"): (3600, 3600, 0, 0, 0, 0, 0), (T0 + HOUR, "alice"): (6000, 1200, 1, 1, 0, 1, 2),
                  (T0 + HOUR, "bob"): (0, 0, 1, 1, 0, 7, 8), (T0 + HOUR, "carol"): (0, 0, 1, 1, 0, 100, 200),
                  (T0 + HOUR, ""): (0, 0, 1, 1, 0, 3, 4)}
FIGURES = ("gpu_seconds_reserved", "gpu_seconds_ready", "requests", "successes", "failures", "tokens_in", "tokens_out")


def figures(row: Any) -> tuple[float, ...]:
    """A row's (or a total's) figures in FIGURES' order, from its contract or its JSON."""
    return tuple(row[name] if isinstance(row, dict) else getattr(row, name) for name in FIGURES)


def play(store: Store) -> None:
    """Run the scenario against a store: users, workflows, nodes, placements on the scripted clock, audit batches."""
    clock = [0.0]
    store.placements.clock = lambda: clock[0]
    for user, (org, groups) in USERS.items():
        store.ensure_user(user, org, groups)
    with store.session() as session:
        for workflow_id, owner in WORKFLOWS.items():
            session.add(WorkflowRow(id=workflow_id, entry="vLLM", owner=owner, org=USERS[owner][0], created_at=T0,
                                    definition="", endpoint_id=f"ep-{workflow_id[-1]}"))
    for node_id in ("node-1", "node-2"):
        store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "simulator",
                                       "gpus": simulated_gpus("4x80GB", node_id)}, 30000)
    steps = [(T0 - HOUR, "reserve", "wf-c", 4), (T0 - 3000, "ready", "wf-c", 0), (T0, "reserve", "wf-b", 1),
             (T0 + 300, "ready", "wf-b", 0), (T0 + 600, "reserve", "wf-a", 2), (T0 + 900, "release", "wf-c", 0),
             (T0 + 1200, "ready", "wf-a", 0), (T0 + 1800, "release", "wf-b", 0), (T0 + 4200, "release", "wf-a", 0),
             (T0 + 4800, "reserve", "wf-a", 2)]
    for at, step, workflow_id, gpus in steps:
        clock[0] = at
        copy_id = f"{workflow_id}.copy-0"
        if step == "reserve":
            reserved = store.placements.reserve(ReserveRequest(workflow_id=workflow_id, copy_id=copy_id, nodes=1,
                                                               gpus_per_node=gpus))
            assert reserved.placement is not None, reserved.blocked_reason
        elif step == "ready":
            assert store.placements.publish(workflow_id, f"ep-{workflow_id[-1]}", copy_id, "http://x:1", ready=True)
        else:
            store.placements.release(copy_id)
    store.audit.append_batch(AuditBatch.of("proxy-1", 1, [record for request in REQUESTS for record in
                                                          _records(*request)]))


def _records(user: str | None, endpoint: str, at: float, status: int, tokens_in: int,
             tokens_out: int) -> list[AuditRecord]:
    request = f"r-{endpoint}-{at:.0f}"
    outcome = AuditPhase.SUCCESS if status < 400 else AuditPhase.FAILED
    return [AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=request, user=user, endpoint_id=endpoint),
            AuditRecord(at=at + 0.25, phase=outcome, request_id=request, status=status, user=user,
                        endpoint_id=endpoint, copy_id=f"{endpoint}.copy-0", tokens_in=tokens_in,
                        tokens_out=tokens_out)]
