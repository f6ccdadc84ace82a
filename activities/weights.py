"""weights: download a model snapshot from an HF endpoint into a volume, with progress and typed errors.

The Hub's side lives here (resolve the revision, list the files, fetch, translate its failures); what is
already on the volume in `weights_volume.py`, the progress events in `weights_progress.py`."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# huggingface_hub reads this switch once, when it is imported. Xet transfers go to Hugging Face's own
# storage hosts rather than to the endpoint we are given, which an offline mirror cannot serve.
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

from huggingface_hub import HfApi, snapshot_download  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFoundError  # noqa: E402
from huggingface_hub.hf_api import RepoFile  # noqa: E402
from huggingface_hub.utils import filter_repo_objects  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from activities.errors import (  # noqa: E402
    GatedModelError,
    HubRequestError,
    HubUnavailableError,
    ModelNotFoundError,
    RevisionNotFoundError,
    VolumeFullError,
    WeightsError,
)
from activities.weights_progress import ProgressCallback, ProgressReporter  # noqa: E402
from activities.weights_volume import RemoteFile, file_identities, prepare_volume  # noqa: E402

try:  # huggingface_hub 2.x talks through httpx2; 1.x through httpx
    from httpx2 import TransportError
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub major
    from httpx import TransportError  # type: ignore[assignment]

logger = logging.getLogger(__name__)

TOKEN_HINT = "set HfTokenSecret=secret://user/NAME (a secret of type hf holding a token with access)"


@dataclass(frozen=True)
class WeightsRequest:
    """What to download, from where, into which volume directory."""

    repo_id: str
    local_dir: str
    endpoint: str  # HF_ENDPOINT, passed explicitly: the worker's environment is not consulted
    revision: str = "main"
    allow_patterns: tuple[str, ...] | None = None
    ignore_patterns: tuple[str, ...] | None = None
    token: str | None = field(default=None, repr=False)  # already resolved from HfTokenSecret
    max_workers: int = 8
    progress_interval_seconds: float = 1.0


@dataclass(frozen=True)
class WeightsResult:
    """Where the snapshot is, which commit it is, and what this attempt had to fetch."""

    repo_id: str
    revision: str
    commit: str
    local_dir: str
    files: int
    bytes_total: int
    bytes_downloaded: int  # size of the files this attempt wrote (interrupted files restart from zero)
    cache_hit: bool  # every file was already complete in the volume: nothing was fetched
    seconds: float


class _SilentTqdm(tqdm):  # type: ignore[type-arg]
    """huggingface_hub's own bars would only clutter a worker's stderr: progress is reported by us."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


async def download_weights(
    request: WeightsRequest, progress: ProgressCallback | None = None
) -> WeightsResult:
    """Download `request.repo_id` at `request.revision` into `request.local_dir`.

    A complete earlier download of the same commit is reused without fetching anything (cache_hit).
    After an interrupted attempt the finished files are kept and only the missing ones are fetched;
    a file that was partly written restarts from zero (huggingface_hub 2.x never resumes a partial left
    by another process), and the dead partial is deleted first. Raises a `WeightsError` subclass.
    """
    started = time.monotonic()
    local_dir = Path(request.local_dir)
    api = HfApi(endpoint=request.endpoint, token=_token(request), library_name="berth")
    # Every blocking step (HTTP metadata calls, stat/rglob over the volume) runs in a worker thread.
    commit, files = await asyncio.to_thread(_resolve, api, request)
    snapshot = f"{request.repo_id}@{request.revision}"
    before, bytes_done = await asyncio.to_thread(prepare_volume, local_dir, files, snapshot)
    total = sum(file.size for file in files)
    logger.info(
        "weights: %s (commit %s): %d files, %d bytes into %s (%d already there)",
        snapshot,
        commit,
        len(files),
        total,
        local_dir,
        bytes_done,
    )
    await _fetch(request, commit, ProgressReporter(request.repo_id, local_dir, files, started), progress)
    after = await asyncio.to_thread(file_identities, local_dir, files)
    written = [file for file in files if after[file.path] != before[file.path]]
    return WeightsResult(
        repo_id=request.repo_id,
        revision=request.revision,
        commit=commit,
        local_dir=str(local_dir),
        files=len(files),
        bytes_total=total,
        bytes_downloaded=sum(file.size for file in written),
        cache_hit=not written,
        seconds=round(time.monotonic() - started, 3),
    )


async def _fetch(
    request: WeightsRequest, commit: str, reporter: ProgressReporter, progress: ProgressCallback | None
) -> None:
    """Run the snapshot download in a worker thread, sampling progress every interval until it ends."""
    download = asyncio.ensure_future(asyncio.to_thread(_snapshot, request, commit))
    try:
        while True:
            finished, _ = await asyncio.wait({download}, timeout=request.progress_interval_seconds)
            event = await asyncio.to_thread(reporter.sample)
            if progress is not None:
                progress(event)  # on the event loop's thread: Temporal heartbeats must be sent from there
            if finished:
                break
        download.result()
    except WeightsError:
        raise
    except Exception as exc:
        mapped = _map_error(exc, request)
        if mapped is None:
            raise
        raise mapped from exc


def _token(request: WeightsRequest) -> str | bool:
    # False, not None: None would make huggingface_hub fall back to HF_TOKEN or a token saved on the
    # worker, so a workflow without HfTokenSecret would silently borrow the operator's credentials.
    return request.token if request.token else False


def _resolve(api: HfApi, request: WeightsRequest) -> tuple[str, list[RemoteFile]]:
    """Resolve the revision to a commit and list the files to fetch with their sizes."""
    try:
        info = api.model_info(request.repo_id, revision=request.revision, files_metadata=True)
        if info.gated and not request.token:
            raise GatedModelError(
                f"{request.repo_id} is a gated model ({info.gated} approval): {TOKEN_HINT} and accept "
                f"the model's conditions on its Hugging Face page with that account."
            )
        if info.sha is None:
            where = f"{request.repo_id}@{request.revision}"
            raise HubRequestError(f"{request.endpoint} returned no commit for {where}")
        siblings = info.siblings or []
        if siblings and all(sibling.size is not None for sibling in siblings):
            listing = [
                RemoteFile(
                    sibling.rfilename,
                    int(sibling.size or 0),
                    sibling.lfs.sha256 if sibling.lfs else str(sibling.blob_id),
                )
                for sibling in siblings
            ]
        else:
            # olah's local mirrors list no sizes in model_info; the tree listing has them.
            listing = [
                RemoteFile(entry.path, entry.size, entry.lfs.sha256 if entry.lfs else entry.blob_id)
                for entry in api.list_repo_tree(request.repo_id, revision=info.sha, recursive=True)
                if isinstance(entry, RepoFile)
            ]
    except WeightsError:
        raise
    except Exception as exc:
        mapped = _map_error(exc, request, api=api)
        if mapped is None:
            raise
        raise mapped from exc
    wanted = set(
        filter_repo_objects(
            [file.path for file in listing],
            allow_patterns=_patterns(request.allow_patterns),
            ignore_patterns=_patterns(request.ignore_patterns),
        )
    )
    return info.sha, sorted((file for file in listing if file.path in wanted), key=lambda file: file.path)


def _patterns(patterns: tuple[str, ...] | None) -> list[str] | None:
    return list(patterns) if patterns is not None else None


def _snapshot(request: WeightsRequest, commit: str) -> str:
    # Passing the commit (not the branch) skips a second revision lookup and lets finished files be
    # recognised from their local metadata without any request.
    return snapshot_download(
        request.repo_id,
        revision=commit,
        local_dir=request.local_dir,
        endpoint=request.endpoint,
        token=_token(request),
        allow_patterns=_patterns(request.allow_patterns),
        ignore_patterns=_patterns(request.ignore_patterns),
        max_workers=request.max_workers,
        library_name="berth",
        tqdm_class=_SilentTqdm,
    )


def _map_error(exc: BaseException, request: WeightsRequest, api: HfApi | None = None) -> WeightsError | None:
    """Translate a huggingface_hub / OS failure into a typed, actionable WeightsError (None: unknown)."""
    where = f"{request.repo_id}@{request.revision} from {request.endpoint}"
    # Order matters: GatedRepoError is a RepositoryNotFoundError, and every HfHubHTTPError is an OSError.
    if isinstance(exc, GatedRepoError):
        if request.token:
            return GatedModelError(
                f"The token from HfTokenSecret has no access to gated model {request.repo_id}: accept the "
                f"model's conditions on its Hugging Face page with the token's account, or use another token."
            )
        return GatedModelError(f"{request.repo_id} is a gated model: {TOKEN_HINT}.")
    if isinstance(exc, HubRevisionNotFoundError):
        return _revision_not_found(request)
    if isinstance(exc, RepositoryNotFoundError):
        # olah answers an unknown revision of a known repository with "Repository not found"; tell the
        # two apart by asking for the default branch.
        if api is not None and _repository_exists(api, request.repo_id):
            return _revision_not_found(request)
        hint = "." if request.token else f"; if it is private or gated, {TOKEN_HINT}."
        return ModelNotFoundError(f"Model repository {request.repo_id} not found at {request.endpoint}{hint}")
    if isinstance(exc, DisabledRepoError):
        return HubRequestError(f"Model repository {request.repo_id} is disabled (by its owner or the Hub).")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return GatedModelError(
                f"Access to {where} refused ({status}): check the token in HfTokenSecret "
                f"(missing, expired, or without access to this model)."
            )
        if status == 429 or (status is not None and status >= 500):
            return HubUnavailableError(f"{where}: the endpoint answered {status}; retry later.")
        return HubRequestError(f"{where}: the endpoint answered {status}: {exc}")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubRequestError(f"HF_HUB_OFFLINE is set in the worker's environment: cannot download {where}.")
    if isinstance(exc, (TransportError, LocalEntryNotFoundError, ConnectionError)):
        return HubUnavailableError(f"Cannot reach {request.endpoint} to download {request.repo_id}: {exc}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return VolumeFullError(
            f"The weights volume {request.local_dir} is full (or over quota) while downloading "
            f"{request.repo_id}: free space or use a larger Volume. The file being written was discarded; "
            f"files already complete are kept for the next attempt."
        )
    return None


def _revision_not_found(request: WeightsRequest) -> RevisionNotFoundError:
    return RevisionNotFoundError(
        f"Model repository {request.repo_id} has no revision {request.revision!r} at {request.endpoint}: "
        f"use an existing branch, tag or commit (Model=hf://{request.repo_id}@REVISION)."
    )


def _repository_exists(api: HfApi, repo_id: str) -> bool:
    # olah knows only branch main of a local mirror and refuses a revision-less lookup; the Hub takes both.
    for revision in (None, "main"):
        try:
            api.model_info(repo_id, revision=revision)
            return True
        except (HfHubHTTPError, TransportError):
            continue
    return False
