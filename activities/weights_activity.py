"""The weights job as a node activity: resolve the volume, download (or dry-run), heartbeat progress."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity

from workflows.payloads import DownloadProgress, WeightsInput, WeightsResult

if TYPE_CHECKING:
    from activities.ranks import NodeContext


def model_dir_for(context: NodeContext, request: WeightsInput) -> Path:
    job = request.job
    revision = job.revision or "main"
    if job.volume:
        base = context.state.persistent_volume(job.volume)
    else:
        base = context.state.ephemeral_volume(request.workflow_id)
    return base / "models" / job.repo / revision


async def download_into_volume(context: NodeContext, request: WeightsInput) -> WeightsResult:
    target = model_dir_for(context, request)
    if context.engine == "simulator":
        # Dry run: the simulator needs no weights; report the published size as done so the
        # phases and progress bar behave as on a real cluster.
        target.mkdir(parents=True, exist_ok=True)
        size = request.job.size_bytes_hint
        activity.heartbeat(DownloadProgress(bytes_done=size, bytes_total=size).model_dump())
        return WeightsResult(model_dir=str(target), bytes_total=size, dry_run=True)
    from activities import weights

    loop = asyncio.get_running_loop()

    def report(progress: DownloadProgress) -> None:
        loop.call_soon_threadsafe(activity.heartbeat, progress.model_dump())

    return await weights.download_for_activity(request.job, target, report)
