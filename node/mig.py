"""MIG instances on this node (issue 36, docs/mig.md), made only under the `mig_apply` cluster setting.

The store's slice records are the truth placement goes by. With `mig_apply` on, the node agent looks every
`CHECK_EVERY_S` for its node's pending slices (no UUID yet) and makes each one's instance as NVIDIA's MIG user guide
says: MIG mode on for the parent (`nvidia-smi -i GPU -mig 1`; the parent holds no copy while it has slices), then a GPU
instance with its compute instance (`nvidia-smi mig -i GPU -cgi PROFILE -C`). The new instance's `MIG-<UUID>` is the
one `nvidia-smi -L` lists after and not before; the agent records it (`PUT /v1/nodes/{id}/mig/{slice}`), and only then
does placement put a copy on the slice. A command that fails leaves the slice pending and is logged (a fragmented GPU
with no free start for the profile, MIG mode that needs a GPU reset). The agent never destroys an instance: removing a
slice's record with an instance behind it leaves `nvidia-smi mig -dci` and `-dgi` to the administrator.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from berth.api_mig import MigApi
from berth.contracts.mig import MigSlice
from berth.errors import BerthError
from berth.mig_profiles import profile_named

log = logging.getLogger("berth.node.mig")
CHECK_EVERY_S = 30.0
COMMAND_TIMEOUT_S = 60.0
OUTPUT_LIMIT = 64 * 1024  # of a command's output: `nvidia-smi -L` on a full node is a few KB
LIST_COMMAND = ("nvidia-smi", "-L")
LISTED_MIG = re.compile(r"\(UUID: (MIG-[0-9A-Za-z/-]{1,80})\)")

# Runs one command (argv, never a shell): its exit status and its output.
Runner = Callable[[tuple[str, ...]], Awaitable[tuple[int, str]]]
# Records a slice's UUID with the API.
Namer = Callable[[int, str], Awaitable[object]]


def mig_mode_command(gpu: int) -> tuple[str, ...]:
    return ("nvidia-smi", "-i", str(gpu), "-mig", "1")


def create_command(gpu: int, profile: str) -> tuple[str, ...]:
    """A GPU instance of `profile` on `gpu` with its one compute instance (`-C`): the MIG device CUDA sees."""
    return ("nvidia-smi", "mig", "-i", str(gpu), "-cgi", profile_named(profile).name, "-C")


def listed_uuids(listing: str) -> set[str]:
    """The MIG devices' UUIDs in `nvidia-smi -L`'s output (`MIG 1g.10gb Device 0: (UUID: MIG-…)`)."""
    return set(LISTED_MIG.findall(listing))


async def run_command(argv: tuple[str, ...]) -> tuple[int, str]:
    """Run `argv` (no shell), bounded in time and output; a missing binary is a failed command, not a crash."""
    try:
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT)
    except OSError as error:
        return 127, str(error)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return 124, f"{argv[0]} did not finish within {COMMAND_TIMEOUT_S:g} s"
    return process.returncode or 0, out[:OUTPUT_LIMIT].decode(errors="replace")


async def apply_pending(slices: list[MigSlice], run: Runner, name: Namer) -> list[int]:
    """Make the instance of each pending slice and record its UUID; the ids of the slices named."""
    named = []
    for pending in (s for s in slices if s.uuid is None):
        uuid = await _make(pending, run)
        if uuid is not None:
            await name(pending.id, uuid)
            named.append(pending.id)
    return named


async def _make(pending: MigSlice, run: Runner) -> str | None:
    """Make one slice's instance: its UUID, or None (logged) when a command fails or the new device is unclear."""
    _status, before = await run(LIST_COMMAND)
    for argv in (mig_mode_command(pending.gpu), create_command(pending.gpu, pending.profile)):
        status, out = await run(argv)
        if status != 0:
            first = next(iter(out.strip().splitlines()), "")
            log.warning("MIG slice %d (%s of GPU %d) stays pending: `%s` failed (%d): %s", pending.id,
                        pending.profile, pending.gpu, " ".join(argv), status, first)
            return None
    _status, after = await run(LIST_COMMAND)
    new = listed_uuids(after) - listed_uuids(before)
    if len(new) != 1:  # another instance made beside ours, or none listed: naming one would be a guess
        log.warning("MIG slice %d: `nvidia-smi -L` lists %d new MIG device(s); it stays pending", pending.id, len(new))
        return None
    return new.pop()


async def apply_forever(api: MigApi, node_id: str, run: Runner = run_command) -> None:
    """The agent's loop under `mig_apply`: its node's pending slices made, every CHECK_EVERY_S."""
    while True:
        try:
            slices = await api.mig_slices(node_id)
            await apply_pending(slices, run, lambda slice_id, uuid: api.name_mig_slice(node_id, slice_id, uuid))
        except BerthError as error:  # the API away or refusing: the next round asks again
            log.warning("MIG slices of node %s not applied: %s", node_id, error)
        await asyncio.sleep(CHECK_EVERY_S)
