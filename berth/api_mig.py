"""The REST client's MIG slice methods (issue 36): a module of its own, importing only its routes' contracts, so that
`berth node mig` imports no other contracts."""

from __future__ import annotations

from berth.api_transport import ApiTransport, body, many, one, segment
from berth.contracts.mig import MigSlice, MigSliceDeleted, MigSliceRequest, MigSliceUuid


class MigApi(ApiTransport):
    async def mig_slices(self, node_id: str) -> list[MigSlice]:
        return many(MigSlice, await self.request("GET", f"/v1/nodes/{segment(node_id)}/mig"))

    async def create_mig_slice(self, node_id: str, request: MigSliceRequest) -> MigSlice:
        return one(MigSlice, await self.request("POST", f"/v1/nodes/{segment(node_id)}/mig", json=body(request)))

    async def name_mig_slice(self, node_id: str, slice_id: int, uuid: str) -> MigSlice:
        """Record the UUID of the instance made for a pending slice (the node agent, under `mig_apply`)."""
        return one(MigSlice, await self.request("PUT", f"/v1/nodes/{segment(node_id)}/mig/{slice_id}",
                                                json=body(MigSliceUuid(uuid=uuid))))

    async def delete_mig_slice(self, node_id: str, slice_id: int) -> MigSliceDeleted:
        return one(MigSliceDeleted, await self.request("DELETE", f"/v1/nodes/{segment(node_id)}/mig/{slice_id}"))
