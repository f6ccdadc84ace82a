"""MIG slice contracts (issue 36): an administrator's request for a slice of a node's H100, a slice as the store
records it, and the answer to a deletion. The profiles themselves are data in berth/mig_profiles.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from berth.contracts.base import Payload, Response
from berth.mig_profiles import PROFILE_NAMES

# How CUDA_VISIBLE_DEVICES names a MIG device, as `nvidia-smi -L` prints it: `MIG-<UUID>` (R470 drivers on), or the
# older `MIG-GPU-<UUID>/<GPU instance>/<compute instance>`. Bounded to exactly these: it goes into a rank's
# environment, where a comma would name another device.
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
MIG_UUID_PATTERN = rf"^MIG-({_UUID}|GPU-{_UUID}/[0-9]{{1,2}}/[0-9]{{1,2}})$"
MigUuid = Annotated[str, Field(max_length=64, pattern=MIG_UUID_PATTERN)]


class MigSliceRequest(Payload):
    """`POST /v1/nodes/{node_id}/mig`: slice one of the node's GPUs with a profile (a name, `1g.10gb`, or short, `1g`).
    `uuid`: the instance's `MIG-…` where it exists already (made by hand, `nvidia-smi -L` names it)."""

    gpu: Annotated[int, Field(ge=0, le=1023)]
    # The schema lists the names; another is refused in one line that lists them too (berth/mig_profiles.py).
    profile: Annotated[str, Field(min_length=2, max_length=16, json_schema_extra={"enum": list(PROFILE_NAMES)})]
    uuid: MigUuid | None = None


class MigSliceUuid(Payload):
    """`PUT /v1/nodes/{node_id}/mig/{slice_id}`: the UUID of the instance made for a pending slice."""

    uuid: MigUuid


class MigSlice(Response):
    """One slice: its id is the GPU index placement gives it on its node (a copy's `gpus` name it), apart from the
    node's own GPUs' indices; its parent GPU takes no copy while it has slices. `uuid` None: pending, no instance
    named yet, so no copy is placed on it (CUDA_VISIBLE_DEVICES would have nothing to name)."""

    node_id: str
    id: int
    gpu: int  # the parent GPU's index
    profile: str
    memory_gb: float
    uuid: str | None = None
    held_by: str | None = None  # the copy holding it
    created_by: str
    created_at: float


class MigSliceDeleted(Response):
    node_id: str
    id: int
