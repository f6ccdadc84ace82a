"""The REST client's backup and restore methods (berth/api_client.py's ApiClient has them): a module of its own,
importing only its routes' contracts, so that `berth admin` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one

if TYPE_CHECKING:
    from berth.contracts.backup import BackupDocument, BackupRestored


class BackupApi(ApiTransport):
    async def backup(self) -> BackupDocument:
        """The control plane's desired state as one document (administrators only)."""
        return one(contracts.BackupDocument, await self.request("GET", "/v1/admin/backup"))

    async def restore(self, document: BackupDocument) -> BackupRestored:
        """Restore `document` into this empty control plane and start its workflows again (administrators only)."""
        return one(contracts.BackupRestored, await self.request("POST", "/v1/admin/restore",
                                                                json=document.model_dump(mode="json")))
