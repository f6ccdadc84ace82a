"""The control worker: runs PoolWorkflow/CopyWorkflow, the control-side activities and the autoscaler's
loop (control/autoscale_loop.py: it reads the load every API replica recorded in the store)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from temporalio.worker import Worker

from activities.authorization import InputAuthority
from activities.control import ControlActivities
from activities.model_reports import ModelReportActivities
from activities.slurm_copies import for_cluster
from berth.api_client import ApiClient
from berth.heap import settle
from berth.security import Cipher, ReplicaKeys, TokenVerifier
from berth.settings import CONTROL_TASK_QUEUE, SlurmSettings, StateLayout
from berth.temporal import connect
from control.autoscale_loop import Autoscaler
from workflows.copy import CopyWorkflow
from workflows.front import FrontWorkflow
from workflows.model_job import ModelCacheWorkflow, ModelJobWorkflow
from workflows.pool_workflow import PoolWorkflow
from workflows.slurm_copy import SlurmCopyWorkflow


async def run_worker(state_dir: Path, temporal_address: str, api_url: str, token: str,
                     stop: asyncio.Event, task_queue: str = CONTROL_TASK_QUEUE) -> None:
    keys_dir = StateLayout(state_dir).keys
    cipher = Cipher.load_or_create(keys_dir)
    # Each copy's key (derived from one secret in keys/): drains and the autoscaler read a copy's /metrics.
    replica_keys = ReplicaKeys.load_or_create(keys_dir)
    client = await connect(temporal_address, cipher)
    async with ApiClient(api_url, token) as api:
        control = ControlActivities(api, replica_keys)
        models = ModelReportActivities(api)
        # Copies placed as Slurm jobs (issue 35): registered whatever the backend, so a pool started under one
        # setting finishes under another; unconfigured, each refuses in one line.
        slurm = for_cluster(SlurmSettings.load(state_dir), replica_keys, state_dir=state_dir)
        # The public key only: this worker can check the API's grants but never mint one.
        authority = InputAuthority(TokenVerifier.from_jwks(await api.internal_keys_when_up()), task_queue)
        worker = Worker(
            client, task_queue=task_queue, workflows=[PoolWorkflow, CopyWorkflow, SlurmCopyWorkflow, FrontWorkflow,
                                                      ModelJobWorkflow, ModelCacheWorkflow],
            activities=[control.reserve_placement, control.release_placement, control.fence_placement,
                        control.publish_replica,
                        control.unpublish_replica, control.remove_endpoint, control.drain_replica,
                        control.reserve_service_port, control.set_endpoint_service,
                        control.set_traffic, control.revision_health, control.serve_revision,
                        authority.verify_service_input, authority.verify_copy_parent,
                        authority.verify_front_parent, models.load_model_job, models.report_model_state,
                        models.use_model, models.release_models, slurm.submit_slurm_copy, slurm.slurm_copy_state,
                        slurm.wait_slurm_copy_started, slurm.wait_slurm_copy_ready, slurm.watch_slurm_copy,
                        slurm.watch_slurm_copy_health, slurm.cancel_slurm_copy],
        )
        async with worker:
            autoscaler = asyncio.create_task(Autoscaler(api, client, replica_keys=replica_keys).run_forever())
            settle()  # what startup made, out of every later collection (berth/heap.py)
            try:
                await stop.wait()
            finally:
                autoscaler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await autoscaler


def main(state_dir: Path, temporal_address: str, api_url: str, token: str) -> None:
    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(state_dir, temporal_address, api_url, token, stop)

    asyncio.run(runner())
