"""The node agent's MIG instances under `mig_apply` (node/mig.py): the `nvidia-smi` commands it runs for a pending
slice, the UUID it reads from `nvidia-smi -L` (the one new device), and a failed command that leaves the slice
pending. No GPU here: a scripted runner stands in for the binary, and the commands are what is checked."""

from __future__ import annotations

import pytest

from berth.contracts.mig import MigSlice
from node.mig import LIST_COMMAND, apply_pending, create_command, listed_uuids, run_command

pytestmark = pytest.mark.timeout(30)
OLD = "MIG-11111111-2222-4333-8444-555555555555"
NEW = "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
BEFORE = f"""GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-01234567-89ab-cdef-0123-456789abcdef)
  MIG 3g.40gb     Device  0: (UUID: {OLD})
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-11234567-89ab-cdef-0123-456789abcdef)
"""
AFTER = BEFORE + f"  MIG 1g.10gb     Device  0: (UUID: {NEW})\n"


def _slice(slice_id: int, profile: str, uuid: str | None = None) -> MigSlice:
    return MigSlice(node_id="n", id=slice_id, gpu=1, profile=profile, memory_gb=10, uuid=uuid, created_by="admin",
                    created_at=0)


class Script:
    """nvidia-smi as a script: each command's answer, and every command run, in order."""

    def __init__(self, listings: list[str], failing: tuple[str, ...] = ()) -> None:
        self.listings, self.failing, self.ran = listings, failing, []

    async def __call__(self, argv: tuple[str, ...]) -> tuple[int, str]:
        self.ran.append(argv)
        if argv == LIST_COMMAND:
            return 0, self.listings.pop(0)
        if argv in self.failing:
            return 6, "Unable to create a GPU instance on GPU 1 using profile 1g.10gb: Insufficient Resources\n"
        return 0, "Successfully created GPU instance ID 13 on GPU 1 using profile MIG 1g.10gb (ID 19)\n"


def test_the_commands_are_nvidia_smi_s_own_and_the_listing_reads_mig_uuids() -> None:
    assert create_command(1, "1g") == ("nvidia-smi", "mig", "-i", "1", "-cgi", "1g.10gb", "-C")
    assert create_command(0, "7g.80gb") == ("nvidia-smi", "mig", "-i", "0", "-cgi", "7g.80gb", "-C")
    with pytest.raises(ValueError, match="unknown MIG profile"):
        create_command(0, "1g;reboot")
    assert listed_uuids(AFTER) == {OLD, NEW}


async def test_a_pending_slice_is_made_and_named_by_the_one_new_device() -> None:
    script, named = Script([BEFORE, AFTER]), []

    async def name(slice_id: int, uuid: str) -> None:
        named.append((slice_id, uuid))

    slices = [_slice(512, "3g.40gb", uuid=OLD), _slice(513, "1g.10gb")]
    assert await apply_pending(slices, script, name) == [513]
    assert named == [(513, NEW)]
    assert script.ran == [LIST_COMMAND, ("nvidia-smi", "-i", "1", "-mig", "1"), create_command(1, "1g.10gb"),
                          LIST_COMMAND]


async def test_a_failed_command_or_an_unclear_listing_leaves_the_slice_pending() -> None:
    named: list[tuple[int, str]] = []

    async def name(slice_id: int, uuid: str) -> None:
        named.append((slice_id, uuid))

    failing = Script([BEFORE], failing=(create_command(1, "1g.10gb"),))
    assert await apply_pending([_slice(513, "1g")], failing, name) == []
    unclear = Script([BEFORE, BEFORE])  # the command succeeded, yet no new device is listed
    assert await apply_pending([_slice(513, "1g")], unclear, name) == []
    assert named == []


async def test_a_missing_binary_is_a_failed_command() -> None:
    status, out = await run_command(("/nonexistent/nvidia-smi", "-L"))
    assert status == 127 and "nvidia-smi" in out
