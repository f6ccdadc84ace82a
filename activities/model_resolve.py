"""model_resolve: turn a Hugging Face repo and revision into one commit and the checksummed files to fetch.

The fetching itself is `model_fetch.py`; this module only asks the endpoint's API (huggingface_hub's
HfApi), filters the listing by pattern and refuses any path that could leave the staging directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Same switch as in weights.py, set before huggingface_hub is imported (it reads it once, at import).
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

from huggingface_hub import HfApi  # noqa: E402
from huggingface_hub.hf_api import RepoFile  # noqa: E402
from huggingface_hub.utils import filter_repo_objects  # noqa: E402

from activities.errors import GatedModelError, HubRequestError, WeightsError  # noqa: E402
from activities.weights import TOKEN_HINT, WeightsRequest, _map_error  # noqa: E402


@dataclass(frozen=True)
class RemoteFile:
    """One file of a commit, with the checksum its source publishes (LFS sha256, else the git blob id)."""

    path: str  # relative, POSIX, checked by _safe_relative
    size: int
    sha256: str | None = None  # LFS files: the SHA-256 of the content
    blob_id: str | None = None  # other files: the git blob SHA-1 of the content


@dataclass(frozen=True)
class Resolved:
    """A revision pinned to its commit, and the files wanted from it (sorted by path)."""

    commit: str
    files: list[RemoteFile]
    size_bytes: int


def _safe_relative(path: str) -> str:
    """`path` if it is a plain relative POSIX path that stays below its root; ValueError otherwise."""
    # Split by hand: PurePosixPath would quietly normalise "./a" and "a//b" instead of refusing them.
    parts = path.split("/")
    if "\\" in path or "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"refusing file path {path!r} from the repository listing: not a plain relative path")
    return path


def resolve(
    endpoint: str,
    repo: str,
    revision: str,
    token: str | None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
) -> Resolved:
    """Pin `revision` of model repo `repo` to its commit and list the wanted files with their checksums.

    Blocking (HTTP through huggingface_hub): call it from a worker thread. Raises the `WeightsError`
    subclasses of activities.errors (gated, not found, revision not found, unavailable...); the token
    is sent to the endpoint only and never appears in a message.
    """
    request = WeightsRequest(repo_id=repo, local_dir="", endpoint=endpoint, revision=revision, token=token)
    # False, not None: None would let huggingface_hub fall back to a token saved on the worker.
    api = HfApi(endpoint=endpoint, token=token if token else False, library_name="berth")
    try:
        info = api.model_info(repo, revision=revision)
        if info.gated and not token:
            raise GatedModelError(f"{repo} is a gated model ({info.gated} approval): {TOKEN_HINT}.")
        if info.sha is None:
            raise HubRequestError(f"{endpoint} returned no commit for {repo}@{revision}")
        # The tree listing, not model_info's siblings: olah's local mirrors list no sizes in the latter.
        entries = [
            entry
            for entry in api.list_repo_tree(repo, revision=info.sha, recursive=True)
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
        filter_repo_objects([entry.path for entry in entries], allow_patterns=allow_patterns,
                            ignore_patterns=ignore_patterns)
    )
    try:
        files = [_remote_file(entry) for entry in entries if entry.path in wanted]
    except ValueError as exc:
        raise HubRequestError(f"{repo}@{revision} from {endpoint}: {exc}") from exc
    files.sort(key=lambda file: file.path)
    return Resolved(commit=info.sha, files=files, size_bytes=sum(file.size for file in files))


def _remote_file(entry: RepoFile) -> RemoteFile:
    if entry.lfs is not None:
        # An LFS entry's blob id is the pointer file's, not the content's: only the sha256 checks bytes.
        return RemoteFile(_safe_relative(entry.path), int(entry.lfs.size), sha256=entry.lfs.sha256)
    return RemoteFile(_safe_relative(entry.path), int(entry.size), blob_id=entry.blob_id or None)
