"""The weights job as a node activity: resolve the volume and the token, download (or dry-run),
heartbeat progress, and turn download errors into Temporal failures with the right retry verdict."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from berth.errors import BerthError, shown
from catalog.definition import HF_REPO, HF_REVISION
from workflows.payloads import DownloadProgress, WeightsInput, WeightsResult

if TYPE_CHECKING:
    from activities.node_context import NodeContext
    from berth.api_client import ApiClient

DIGEST_MAX_FILES = 100_000  # a snapshot the download accepted is hashed whole


def model_dir_for(context: NodeContext, request: WeightsInput) -> Path:
    """The snapshot's directory inside its volume. The catalog already refuses a revision or repository
    that could leave it; checked again here, where the path is made, since the path is what matters."""
    job = request.job
    revision = job.revision or "main"
    if job.volume:
        base = context.state.persistent_volume(job.volume)
    else:
        base = context.state.ephemeral_volume(request.workflow_id)
    target = base / "models" / job.repo / revision
    inside = target.resolve().is_relative_to((base / "models").resolve())
    if not HF_REPO.fullmatch(job.repo) or not HF_REVISION.match(revision) or not inside:
        raise ApplicationError(f"{job.repo}@{shown(revision)} does not name a directory inside the volume; "
                               "pin a branch, tag or commit id", type="WeightsRevisionError", non_retryable=True)
    return target


async def _token(request: WeightsInput, api: ApiClient | None) -> str | None:
    ref = request.job.hf_token_secret
    if not ref:
        return None
    if api is None:
        raise ApplicationError("this node agent cannot resolve secrets (no API client)", type="SecretError",
                               non_retryable=True)
    try:
        kind, value = await api.resolve_secret(ref, request.owner)
    except BerthError as error:
        raise ApplicationError(f"HfTokenSecret {ref}: {error}", type="SecretError", non_retryable=True) from None
    if kind != "hf":
        raise ApplicationError(f"HfTokenSecret {ref} is a '{kind}' secret; it must be of type hf "
                               '(berth secret create … --type hf \'{"token":"hf_…"}\')', type="SecretError",
                               non_retryable=True)
    return str(json.loads(value)["token"])


async def download_into_volume(context: NodeContext, request: WeightsInput, endpoint: str,
                               api: ApiClient | None = None) -> WeightsResult:
    """Download the entry's weights into its volume from `endpoint` (ClusterSettings.weights_endpoint)."""
    target = model_dir_for(context, request)
    job = request.job
    # Resolved before the dry run too, as a real node would: a secret deleted after submission (or of the
    # wrong type) then fails the same way on simulated nodes as on real ones.
    token = await _token(request, api)
    if context.engine == "simulator":
        # Dry run: the simulator needs no weights; report the published size as done so the
        # phases and progress bar behave as on a real cluster.
        target.mkdir(parents=True, exist_ok=True)
        size = job.size_bytes_hint
        activity.heartbeat(DownloadProgress(bytes_done=size, bytes_total=size).model_dump())
        return WeightsResult(model_dir=str(target), bytes_total=size, dry_run=True)
    from activities import weights, weights_progress
    from activities.errors import WeightsError, application_error

    def report(progress: weights_progress.DownloadProgress) -> None:
        tally.progress(progress.bytes_done, progress.bytes_per_second)
        activity.heartbeat(DownloadProgress(
            bytes_done=progress.bytes_done, bytes_total=progress.bytes_total, rate_bps=progress.bytes_per_second,
            eta_s=progress.eta_seconds, files_done=progress.files_done, files_total=progress.files_total,
        ).model_dump())

    request_spec = weights.WeightsRequest(
        repo_id=job.repo, local_dir=str(target), endpoint=endpoint,
        revision=job.revision or "main", allow_patterns=job.allow_patterns or None,
        ignore_patterns=job.ignore_patterns or None, token=token,
    )
    try:
        with context.downloads.download() as tally:
            result = await weights.download_weights(request_spec, report)
    except WeightsError as error:
        raise application_error(error) from None
    return WeightsResult(model_dir=result.local_dir, bytes_total=result.bytes_total,
                         bytes_transferred=result.bytes_downloaded, cache_hit=result.cache_hit,
                         digest=await _digest(Path(result.local_dir)), model=f"hf://{job.repo}@{result.commit}")


async def _digest(root: Path) -> str:
    """Which bytes the workflow serves: the digest of the snapshot's files (huggingface_hub's own
    bookkeeping under .cache/ left out), hashed in threads while the activity keeps heartbeating."""
    from berth.model_digest import digest_of, manifest_of

    hashing = asyncio.ensure_future(asyncio.to_thread(manifest_of, root, DIGEST_MAX_FILES))
    while True:
        finished, _ = await asyncio.wait({hashing}, timeout=5)
        if finished:
            break
        activity.heartbeat()
    return digest_of(e for e in hashing.result() if not e.path.startswith(".cache/"))
