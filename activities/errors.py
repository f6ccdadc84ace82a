"""errors: the typed failures of Berth's activities, each with an actionable message and a retry verdict.

    WeightsError(Exception)                         .non_retryable, .error_type
    ├── GatedModelError(WeightsError, PermissionError)      gated/private repo, token missing or refused
    ├── ModelNotFoundError(WeightsError, LookupError)       no such repository (or not visible)
    ├── RevisionNotFoundError(WeightsError, LookupError)    the repository exists, the revision does not
    ├── VolumeFullError(WeightsError, OSError)              no space left on the weights volume
    ├── HubUnavailableError(WeightsError, ConnectionError)  endpoint unreachable or 5xx/429: retry later
    ├── HubRequestError(WeightsError, RuntimeError)         any other refusal from the endpoint
    └── ChecksumMismatchError(WeightsError, ValueError)     a fetched file's bytes differ from the listing's: retried
                                                            (defined beside the fetch: activities/model_fetch.py)

`application_error` turns these into `ApplicationError(message, type=error_type,
non_retryable=non_retryable)` for both download activities (weights_activity.py, model_jobs.py); Temporal
owns the retries, so a retryable error is raised after one attempt.
Messages never contain the token.
"""

from __future__ import annotations

import errno

from temporalio.exceptions import ApplicationError


class WeightsError(Exception):
    """Base of every weights-download failure."""

    # Class-level verdicts; the activity wrapper maps them onto ApplicationError.
    non_retryable: bool = True
    error_type: str = "WeightsError"


class GatedModelError(WeightsError, PermissionError):
    """The repository needs a token that was not given, or the given token has no access."""

    error_type = "GatedModel"


class ModelNotFoundError(WeightsError, LookupError):
    """The endpoint knows no repository of that name (the Hub says the same of private ones)."""

    error_type = "ModelNotFound"


class RevisionNotFoundError(WeightsError, LookupError):
    """The repository exists but the requested branch, tag or commit does not."""

    error_type = "RevisionNotFound"


class VolumeFullError(WeightsError, OSError):
    """The weights volume ran out of space; the file being written is discarded, never taken as complete."""

    error_type = "VolumeFull"

    @staticmethod
    def matches(exc: BaseException) -> bool:
        """Whether `exc` is the filesystem saying no more bytes fit (no space left, or over quota)."""
        return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class HubUnavailableError(WeightsError, ConnectionError):
    """The endpoint could not be reached or answered 429/5xx; a later attempt may succeed."""

    non_retryable = False
    error_type = "HubUnavailable"


class HubRequestError(WeightsError, RuntimeError):
    """The endpoint refused the request for a reason not covered above."""

    error_type = "HubRequest"


def application_error(error: WeightsError) -> ApplicationError:
    """The Temporal failure an activity raises for `error`: its message and type, final or retryable by its class."""
    return ApplicationError(str(error), type=error.error_type, non_retryable=error.non_retryable)
