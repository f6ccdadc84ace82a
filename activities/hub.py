"""hub: ask a Hugging Face endpoint what commit and files a revision holds; say its failures as typed errors.

The one listing and the one error mapping of both download paths: `weights.py` (a snapshot into a volume
through huggingface_hub) and `model_fetch.py` (the model registry's verified fetch into its cache).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

# huggingface_hub reads this switch once, when it is imported. Xet transfers go to Hugging Face's own
# storage hosts rather than to the endpoint we are given, which an offline mirror cannot serve.
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

from huggingface_hub import HfApi  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFoundError  # noqa: E402
from huggingface_hub.hf_api import RepoFile, RepoSibling  # noqa: E402
from huggingface_hub.utils import filter_repo_objects  # noqa: E402

from activities.errors import (  # noqa: E402
    GatedModelError,
    HubRequestError,
    HubUnavailableError,
    ModelNotFoundError,
    RevisionNotFoundError,
    WeightsError,
)
from berth.model_paths import ModelPathError, safe_relative  # noqa: E402

try:  # huggingface_hub 2.x talks through httpx2; 1.x through httpx
    from httpx2 import TransportError
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub major
    from httpx import TransportError  # type: ignore[assignment]

TOKEN_HINT = "set HfTokenSecret=secret://user/NAME (a secret of type hf holding a token with access)"

StatusVerdict = type[GatedModelError] | type[HubUnavailableError] | type[HubRequestError]


@dataclass(frozen=True)
class HubSource:
    """One revision of one model repository at one endpoint, and the token to ask with (never shown)."""

    endpoint: str
    repo_id: str
    revision: str
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a commit, with the checksum its source publishes (LFS sha256, else the git blob id)."""

    path: str  # relative, POSIX, checked by safe_listed_path
    size: int
    sha256: str | None = None  # LFS files: the SHA-256 of the content
    blob_id: str | None = None  # other files: the git blob SHA-1 of the content

    @property
    def etag(self) -> str:
        """What huggingface_hub puts in a `.incomplete` partial's name: the LFS sha256, else the git blob id."""
        return self.sha256 or self.blob_id or ""


@dataclass(frozen=True)
class Resolved:
    """A revision pinned to its commit, and the files wanted from it (sorted by path)."""

    commit: str
    files: list[RemoteFile]
    size_bytes: int


def token_argument(token: str | None) -> str | bool:
    """The `token` to hand huggingface_hub: False, not None, when there is none, since None would make it
    fall back to HF_TOKEN or a token saved on the worker, silently borrowing the operator's credentials."""
    return token if token else False


def resolve(
    endpoint: str,
    repo: str,
    revision: str,
    token: str | None,
    allow_patterns: Sequence[str] | None = None,
    ignore_patterns: Sequence[str] | None = None,
    *,
    gated_advice: str = "",
) -> Resolved:
    """Pin `revision` of model repo `repo` to its commit and list the wanted files with sizes and checksums.

    Blocking (HTTP through huggingface_hub): call it from a worker thread. Raises the `WeightsError`
    subclasses of activities.errors; a listed path that could leave the download directory is refused.
    `gated_advice` ends the message for a gated model asked for without a token.
    """
    source = HubSource(endpoint, repo, revision, token)
    api = HfApi(endpoint=endpoint, token=token_argument(token), library_name="berth")
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
        if info.gated and not token:
            raise GatedModelError(f"{repo} is a gated model ({info.gated} approval): {TOKEN_HINT}{gated_advice}.")
        if info.sha is None:
            raise HubRequestError(f"{endpoint} returned no commit for {repo}@{revision}")
        siblings = info.siblings or []
        if siblings and all(sibling.size is not None for sibling in siblings):
            listing = [_sibling_file(sibling) for sibling in siblings]
        else:
            # olah's local mirrors list no sizes in model_info; the tree listing has them.
            entries = api.list_repo_tree(repo, revision=info.sha, recursive=True)
            listing = [_tree_file(entry) for entry in entries if isinstance(entry, RepoFile)]
    except WeightsError:
        raise
    except Exception as exc:
        mapped = map_hub_error(exc, source, api=api)
        if mapped is None:
            raise
        raise mapped from exc
    files = select_files(listing, source, allow_patterns, ignore_patterns)
    return Resolved(commit=info.sha, files=files, size_bytes=sum(file.size for file in files))


def select_files(
    listing: Sequence[RemoteFile],
    source: HubSource,
    allow_patterns: Sequence[str] | None = None,
    ignore_patterns: Sequence[str] | None = None,
) -> list[RemoteFile]:
    """The files of `listing` the patterns keep, sorted by path; HubRequestError if one has an unsafe path."""
    wanted = set(
        filter_repo_objects(
            [file.path for file in listing],
            allow_patterns=list(allow_patterns) if allow_patterns is not None else None,
            ignore_patterns=list(ignore_patterns) if ignore_patterns is not None else None,
        )
    )
    files = [file for file in listing if file.path in wanted]
    for file in files:  # only the wanted ones: a file nobody fetches cannot escape anywhere
        try:
            safe_listed_path(file.path)
        except ValueError as exc:
            raise HubRequestError(f"{source.repo_id}@{source.revision} from {source.endpoint}: {exc}") from exc
    return sorted(files, key=lambda file: file.path)


def safe_listed_path(path: str) -> str:
    """`path` if it is a plain relative POSIX path that stays below its root; ValueError otherwise."""
    # berth.model_paths holds the rule (one for every path a model names); the message is the listing's own.
    try:
        return safe_relative(path)
    except ModelPathError:
        raise ValueError(
            f"refusing file path {path!r} from the repository listing: not a plain relative path"
        ) from None


def _sibling_file(sibling: RepoSibling) -> RemoteFile:
    if sibling.lfs is not None:
        # An LFS entry's blob id is the pointer file's, not the content's: only the sha256 checks bytes.
        return RemoteFile(sibling.rfilename, int(sibling.lfs.size), sha256=sibling.lfs.sha256)
    return RemoteFile(sibling.rfilename, int(sibling.size or 0), blob_id=sibling.blob_id or None)


def _tree_file(entry: RepoFile) -> RemoteFile:
    if entry.lfs is not None:
        return RemoteFile(entry.path, int(entry.lfs.size), sha256=entry.lfs.sha256)
    return RemoteFile(entry.path, int(entry.size), blob_id=entry.blob_id or None)


def status_verdict(status: int | None) -> StatusVerdict:
    """Whose fault an endpoint's refusal is: the token's (401/403), the endpoint's for now (429, 5xx: retry
    later), or the request's (anything else)."""
    if status in (401, 403):
        return GatedModelError
    if status is not None and (status == 429 or status >= 500):
        return HubUnavailableError
    return HubRequestError


def map_hub_error(exc: BaseException, source: HubSource, api: HfApi | None = None) -> WeightsError | None:
    """Translate a huggingface_hub / transport failure into a typed, actionable WeightsError (None: unknown).

    With `api`, an unknown repository is told apart from an unknown revision of a known one."""
    repo = source.repo_id
    where = f"{repo}@{source.revision} from {source.endpoint}"
    # Order matters: GatedRepoError is a RepositoryNotFoundError, and every HfHubHTTPError is an OSError.
    if isinstance(exc, GatedRepoError):
        if source.token:
            return GatedModelError(
                f"The token from HfTokenSecret has no access to gated model {repo}: accept the "
                f"model's conditions on its Hugging Face page with the token's account, or use another token."
            )
        return GatedModelError(f"{repo} is a gated model: {TOKEN_HINT}.")
    if isinstance(exc, HubRevisionNotFoundError):
        return _revision_not_found(source)
    if isinstance(exc, RepositoryNotFoundError):
        # olah answers an unknown revision of a known repository with "Repository not found"; tell the
        # two apart by asking for the default branch.
        if api is not None and _repository_exists(api, repo):
            return _revision_not_found(source)
        hint = "." if source.token else f"; if it is private or gated, {TOKEN_HINT}."
        return ModelNotFoundError(f"Model repository {repo} not found at {source.endpoint}{hint}")
    if isinstance(exc, DisabledRepoError):
        return HubRequestError(f"Model repository {repo} is disabled (by its owner or the Hub).")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        verdict = status_verdict(status)
        if verdict is GatedModelError:
            return verdict(
                f"Access to {where} refused ({status}): check the token in HfTokenSecret "
                f"(missing, expired, or without access to this model)."
            )
        if verdict is HubUnavailableError:
            return verdict(f"{where}: the endpoint answered {status}; retry later.")
        return verdict(f"{where}: the endpoint answered {status}: {exc}")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubRequestError(f"HF_HUB_OFFLINE is set in the worker's environment: cannot download {where}.")
    if isinstance(exc, (TransportError, LocalEntryNotFoundError, ConnectionError)):
        return HubUnavailableError(f"Cannot reach {source.endpoint} to download {repo}: {exc}")
    return None


def _revision_not_found(source: HubSource) -> RevisionNotFoundError:
    return RevisionNotFoundError(
        f"Model repository {source.repo_id} has no revision {source.revision!r} at {source.endpoint}: "
        f"use an existing branch, tag or commit (Model=hf://{source.repo_id}@REVISION)."
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
