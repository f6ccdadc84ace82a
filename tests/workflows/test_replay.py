"""Histories recorded under the code before self-healing pools still replay: running workflows survive
the upgrade (`workflow.patched("pool-self-healing")`). Recorded on a simulated stack: a MinReplicas=2 pool
with ReplaceFailedCopies=1 whose crashed copy was replaced, then stopped; one with the old default of 0,
failed at its minimum by one crash. Payloads decrypted, generated API keys removed. And the shape after
`front-child-and-continue-as-new` (tests/workflows/record_histories.py): a Proxy=true pool's run that continued
as new, its last run (scaled up and in, stopped), its FrontWorkflow and a copy that outlived a continue-as-new.
And model jobs (tests/workflows/record_model_histories.py): a pool that waited for `model://smol`, and its job.
And `reserve-settles-before-release` (tests/workflows/record_reserve_histories.py): a pool stopped while its copy's
reserve_placement still ran, and that copy. And `slurm-start-wait` (tests/workflows/record_slurm_histories.py): a Slurm
copy that waited for its pending job with workflow timers, then served and was stopped. And `front-restart-at-once`
(tests/workflows/record_front_restart_histories.py): a FrontWorkflow whose LiteLLM crashed and was started again
after the 1 s back-off (a timer) that the first restart waited before the patch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.copy import CopyWorkflow
from workflows.front import FrontWorkflow
from workflows.model_job import ModelCacheWorkflow, ModelJobWorkflow
from workflows.pool_workflow import PoolWorkflow
from workflows.slurm_copy import SlurmCopyWorkflow

HISTORIES = Path(__file__).parent / "histories"


async def test_recorded_histories_replay_on_the_current_code() -> None:
    paths = sorted(HISTORIES.glob("*.json"))
    assert len(paths) == 18
    assert {"ServiceWorkflow-7-continued", "ServiceWorkflow-8-after-continue", "FrontWorkflow-9",
            "ServiceWorkflow-14-stopped-reserving", "CopyWorkflow-15-stopped-reserving",
            "SlurmCopyWorkflow-16-pending-timers", "FrontWorkflow-17-restarted"} <= {
        path.stem for path in paths}

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in paths:
            yield WorkflowHistory.from_json(path.stem, path.read_text())

    replayer = Replayer(workflows=[PoolWorkflow, CopyWorkflow, FrontWorkflow, ModelJobWorkflow, ModelCacheWorkflow,
                                   SlurmCopyWorkflow], data_converter=pydantic_data_converter)
    results = await replayer.replay_workflows(histories(), raise_on_replay_failure=False)
    assert results.replay_failures == {}
