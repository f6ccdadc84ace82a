"""`berth node mig list|create|delete`: the MIG slices of a node's H100s (issue 36, docs/mig.md). Placement takes each
slice as a GPU and its parent as none while it has slices. Administrators only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, Rows, answer, console, listing

if TYPE_CHECKING:
    from berth.contracts.mig import MigSlice

app = typer.Typer(help="MIG slices of a node's H100 GPUs (administrators).", no_args_is_help=True)
NodeArgument = Annotated[str, typer.Argument(help="The node's id (`berth node list`)")]
COLUMNS = [("id", "SLICE"), ("gpu", "GPU"), ("profile", "PROFILE"), ("memory", "MEMORY"),
           ("uuid", "UUID"), ("held_by", "HELD BY")]


@app.command("list")
def mig_list(node_id: NodeArgument, output: OutputOption = Format.TABLE) -> None:
    """List a node's MIG slices: each one's id (its GPU index in placements), parent GPU, profile, UUID and holder."""
    from berth.api_mig import MigApi

    listing(output, lambda api: api.mig_slices(node_id), COLUMNS, rows=_rows, api=MigApi)


def _rows(slices: list[MigSlice]) -> Rows:
    return [{"id": s.id, "gpu": s.gpu, "profile": s.profile, "memory": f"{s.memory_gb:g} GB",
             "uuid": s.uuid or "pending", "held_by": s.held_by or ""} for s in slices]


@app.command("create")
def mig_create(node_id: NodeArgument,
               gpu: Annotated[int, typer.Option(help="The parent GPU's index on the node")],
               profile: Annotated[str, typer.Option(help="1g.10gb, 2g.20gb, 3g.40gb or 7g.80gb (or 1g, 2g, 3g, 7g)")],
               uuid: Annotated[str | None, typer.Option(
                   help="The instance's MIG-<UUID> (`nvidia-smi -L`) where it was made by hand")] = None,
               output: OutputOption = Format.TABLE) -> None:
    """Slice an H100 80GB: the slice takes copies as a GPU of its own, the parent none while it has slices."""
    from pydantic import ValidationError

    from berth.api_mig import MigApi
    from berth.contracts.mig import MigSliceRequest

    try:
        request = MigSliceRequest(gpu=gpu, profile=profile.strip().lower(), uuid=uuid)
    except ValidationError as error:  # its first problem, in one line, before anything is sent
        problem = error.errors()[0]
        raise typer.BadParameter(f"{problem['loc'][0]}: {problem['msg']}") from None
    made = answer(output, lambda api: api.create_mig_slice(node_id, request), MigApi)
    if made is not None:
        state = f"named {made.uuid}" if made.uuid else "pending: no instance named yet, so no copy lands on it"
        console.print(f"Made MIG slice {made.id} ({made.profile}) of GPU {made.gpu} on node {made.node_id}; {state}.",
                      highlight=False, soft_wrap=True)


@app.command("delete")
def mig_delete(node_id: NodeArgument,
               slice_id: Annotated[int, typer.Argument(help="The slice's id (`berth node mig list NODE`)")],
               output: OutputOption = Format.TABLE) -> None:
    """Remove a MIG slice no copy holds; its GPU takes copies whole again once it has no slices left."""
    from berth.api_mig import MigApi

    gone = answer(output, lambda api: api.delete_mig_slice(node_id, slice_id), MigApi)
    if gone is not None:
        console.print(f"Removed MIG slice {gone.id} from node {gone.node_id}.", highlight=False)
