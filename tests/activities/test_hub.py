"""Tests for activities.hub's pure parts: the listing's selection and path safety, and the one error mapping.

No endpoint: huggingface_hub's own exception and listing types are built by hand. The listing against real
olah is exercised by test_model_fetch.py and test_weights.py, through both download paths.
"""

from __future__ import annotations

import errno

import httpx2
import pytest

from activities import hub
from activities.errors import (
    GatedModelError,
    HubRequestError,
    HubUnavailableError,
    ModelNotFoundError,
    RevisionNotFoundError,
)
from activities.hub import HubSource, RemoteFile, map_hub_error, safe_listed_path, select_files, status_verdict

ENDPOINT = "http://hub.invalid"
SOURCE = HubSource(ENDPOINT, "acme/x", "main")
WHERE = f"acme/x@main from {ENDPOINT}"
TOKEN = "hf_secret_value_123"
# huggingface_hub's own types, taken from activities.hub: importing huggingface_hub before it would miss the
# switches hub sets for the whole test process (HF_HUB_DISABLE_XET).
GatedRepoError, HfHubHTTPError = hub.GatedRepoError, hub.HfHubHTTPError
RepositoryNotFoundError, HubRevisionNotFoundError = hub.RepositoryNotFoundError, hub.HubRevisionNotFoundError
RepoFile, RepoSibling = hub.RepoFile, hub.RepoSibling


def http_error(cls: type[hub.HfHubHTTPError], status: int) -> hub.HfHubHTTPError:
    request = httpx2.Request("GET", f"{ENDPOINT}/api/models/acme/x/revision/main")
    return cls(f"{status} Client Error", response=httpx2.Response(status, request=request))


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a\\b", "a\0b", "", "./a", "a\nb"])
def test_unsafe_relative_paths_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="not a plain relative path"):
        safe_listed_path(path)
    assert safe_listed_path("sub/dir/model.safetensors") == "sub/dir/model.safetensors"


def test_selection_applies_the_patterns_sorts_and_refuses_a_wanted_unsafe_path() -> None:
    listing = [RemoteFile("b.json", 1), RemoteFile("a.json", 2), RemoteFile("../evil.bin", 3)]
    chosen = select_files(listing, SOURCE, ["*.json"])
    assert [file.path for file in chosen] == ["a.json", "b.json"]  # the unsafe path was not wanted
    assert [file.path for file in select_files(listing, SOURCE, None, ["*.bin", "b.*"])] == ["a.json"]
    with pytest.raises(HubRequestError) as refused:
        select_files(listing, SOURCE)
    assert str(refused.value) == (
        f"{WHERE}: refusing file path '../evil.bin' from the repository listing: not a plain relative path"
    )


def test_siblings_and_tree_entries_give_the_same_checksums() -> None:
    from huggingface_hub.hf_api import BlobLfsInfo

    lfs = BlobLfsInfo(size=10, sha256="f" * 64, pointer_size=130)
    assert hub._sibling_file(RepoSibling("w.safetensors", 10, "p" * 40, lfs)) == RemoteFile(
        "w.safetensors", 10, sha256="f" * 64
    )
    assert hub._sibling_file(RepoSibling("c.json", 3, "b" * 40)) == RemoteFile("c.json", 3, blob_id="b" * 40)
    lfs_entry = {"size": 10, "oid": "f" * 64, "pointerSize": 130}
    entry = RepoFile(path="w.safetensors", size=130, oid="p" * 40, lfs=lfs_entry)
    assert hub._tree_file(entry) == RemoteFile("w.safetensors", 10, sha256="f" * 64)
    assert hub._tree_file(RepoFile(path="c.json", size=3, oid="b" * 40)).blob_id == "b" * 40
    # huggingface_hub names a partial after the content's checksum: weights_volume finds them by it.
    assert RemoteFile("w", 10, sha256="f" * 64).etag == "f" * 64
    assert RemoteFile("c", 3, blob_id="b" * 40).etag == "b" * 40


@pytest.mark.parametrize(("status", "verdict"), [
    (401, GatedModelError), (403, GatedModelError), (429, HubUnavailableError), (500, HubUnavailableError),
    (503, HubUnavailableError), (404, HubRequestError), (400, HubRequestError), (None, HubRequestError),
])
def test_status_verdicts(status: int | None, verdict: type) -> None:
    assert status_verdict(status) is verdict


def test_http_refusals_map_to_typed_errors_with_their_messages() -> None:
    refused = map_hub_error(http_error(HfHubHTTPError, 401), SOURCE)
    assert isinstance(refused, GatedModelError) and str(refused) == (
        f"Access to {WHERE} refused (401): check the token in HfTokenSecret "
        f"(missing, expired, or without access to this model)."
    )
    outage = map_hub_error(http_error(HfHubHTTPError, 503), SOURCE)
    assert isinstance(outage, HubUnavailableError) and not outage.non_retryable
    assert str(outage) == f"{WHERE}: the endpoint answered 503; retry later."
    other = map_hub_error(http_error(HfHubHTTPError, 400), SOURCE)
    assert isinstance(other, HubRequestError) and str(other).startswith(f"{WHERE}: the endpoint answered 400: ")


def test_repository_errors_name_the_fix_and_never_the_token() -> None:
    anonymous = map_hub_error(http_error(GatedRepoError, 401), SOURCE)
    assert isinstance(anonymous, GatedModelError)
    assert str(anonymous) == f"acme/x is a gated model: {hub.TOKEN_HINT}."
    with_token = HubSource(ENDPOINT, "acme/x", "main", TOKEN)
    assert TOKEN not in repr(with_token)
    denied = map_hub_error(http_error(GatedRepoError, 403), with_token)
    assert isinstance(denied, GatedModelError) and "token from HfTokenSecret has no access" in str(denied)
    assert TOKEN not in str(denied)
    missing = map_hub_error(http_error(RepositoryNotFoundError, 404), SOURCE)
    assert isinstance(missing, ModelNotFoundError) and str(missing) == (
        f"Model repository acme/x not found at {ENDPOINT}; if it is private or gated, {hub.TOKEN_HINT}."
    )
    revision = map_hub_error(http_error(HubRevisionNotFoundError, 404), HubSource(ENDPOINT, "acme/x", "v9"))
    assert isinstance(revision, RevisionNotFoundError) and "no revision 'v9'" in str(revision)


def test_transport_failures_are_retryable_and_unknown_ones_pass_through() -> None:
    unreachable = map_hub_error(httpx2.ConnectError("connection refused"), SOURCE)
    assert isinstance(unreachable, HubUnavailableError)
    assert str(unreachable) == f"Cannot reach {ENDPOINT} to download acme/x: connection refused"
    assert map_hub_error(ValueError("something else"), SOURCE) is None
    # A full disk is the volume's failure, not the endpoint's: each download path words it itself.
    assert map_hub_error(OSError(errno.ENOSPC, "No space left on device"), SOURCE) is None
