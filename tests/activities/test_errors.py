"""Tests for activities.errors: the disk-full verdict and the Temporal failure each download error becomes."""

from __future__ import annotations

import errno

from activities.errors import GatedModelError, HubUnavailableError, VolumeFullError, application_error


def test_disk_full_is_recognised_by_errno() -> None:
    assert VolumeFullError.matches(OSError(errno.ENOSPC, "No space left on device"))
    assert VolumeFullError.matches(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not VolumeFullError.matches(OSError(errno.EACCES, "Permission denied"))
    assert not VolumeFullError.matches(ValueError("no errno"))


def test_application_error_keeps_the_message_type_and_retry_verdict() -> None:
    final = application_error(GatedModelError("acme/x is a gated model"))
    assert (final.message, final.type, final.non_retryable) == ("acme/x is a gated model", "GatedModel", True)
    later = application_error(HubUnavailableError("retry later"))
    assert (later.message, later.type, later.non_retryable) == ("retry later", "HubUnavailable", False)
