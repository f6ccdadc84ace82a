"""Backup and restore of the control plane (docs/backup.md): the document with the checks of the keys it needs, and a
restore that writes the store, then starts each restored workflow's pool again under its own ID and endpoint.

The keys themselves (the state dir's `keys/`) are never in the document: a restore needs the backed-up control plane's
keys in place, as etcd needs its encryption configuration, and refuses in one line where they differ."""

from __future__ import annotations

import binascii
import hmac
import time

from cryptography.exceptions import InvalidTag
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from berth.api_keys import PresentedKey
from berth.contracts import (
    BACKUP_FORMAT,
    BACKUP_VERSION,
    BackupDocument,
    BackupKeys,
    BackupRestored,
    BackupWorkflow,
    RestoredWorkflow,
)
from berth.errors import NotFoundError, UserInputError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from server.context import ServerContext
from server.pool_start import start_pool
from server.store import backup as store_backup
from server.store.schema import head_revision
from server.views import endpoint_url

# A fixed text under each secret key: whoever holds the same key reproduces (or decrypts) it; nobody learns the key.
KEY_CHECK_TEXT = "berth-backup-key-check"
_KEY_CHECK = PresentedKey(prefix="backup", secret=KEY_CHECK_TEXT)
_OTHER_KEYS = ("The backup was made under other keys ({which} differs): copy the backed-up control plane's "
               "state-dir keys/ here (or its BERTH_KEY_HMAC_SECRET_FILE), then restore.")


def backup_keys(context: ServerContext) -> BackupKeys:
    return BackupKeys(signing_key_id=context.signing.kid,
                      data_key_check=context.cipher.encrypt_json(KEY_CHECK_TEXT),
                      key_hash_check=context.api_keys.hasher.digest(_KEY_CHECK))


def make_backup(context: ServerContext) -> BackupDocument:
    """The document, its tables read in one transaction. Reads the store: off the event loop."""
    return BackupDocument(format=BACKUP_FORMAT, version=BACKUP_VERSION, created_at=time.time(),
                          store_revision=head_revision(), keys=backup_keys(context),
                          tables=store_backup.export_tables(context.store))


def refuse_other_keys(context: ServerContext, keys: BackupKeys) -> None:
    """Refuse, in one line, a control plane whose keys are not the backup's: its ciphertexts would not decrypt, its
    API keys and tokens would not verify."""
    if keys.signing_key_id != context.signing.kid:
        raise UserInputError(_OTHER_KEYS.format(which="the token signing key"))
    try:
        same_data_key = context.cipher.decrypt_json(keys.data_key_check) == KEY_CHECK_TEXT
    except (InvalidTag, binascii.Error, ValueError):
        same_data_key = False
    if not same_data_key:
        raise UserInputError(_OTHER_KEYS.format(which="the data key"))
    if not hmac.compare_digest(context.api_keys.hasher.digest(_KEY_CHECK), keys.key_hash_check):
        raise UserInputError(_OTHER_KEYS.format(which="the API keys' HMAC secret"))


async def restore(context: ServerContext, document: BackupDocument) -> BackupRestored:
    """Write the document into this (empty) control plane, then start every workflow that was not stopped. Temporal
    is reached before anything is written, so an unreachable one leaves the store as it was (503)."""
    refuse_other_keys(context, document.keys)
    await run_in_threadpool(store_backup.refuse_in_use_now, context.store)  # at once, before reaching Temporal
    client = await context.temporal()
    rows = await run_in_threadpool(store_backup.import_tables, context.store, document.tables)
    await run_in_threadpool(context.tokens.load)  # the restored revocations apply from the next request, not later
    endpoints = {endpoint.id for endpoint in document.tables.endpoints}
    workflows = [await _restart(context, client, workflow, workflow.endpoint_id in endpoints)
                 for workflow in document.tables.workflows]
    return BackupRestored(rows=rows, workflows=workflows)


async def _restart(context: ServerContext, client: Client, workflow: BackupWorkflow,
                   has_endpoint: bool) -> RestoredWorkflow:
    """Start a restored workflow's pool again (a pool Temporal still runs under the ID is adopted, not doubled)."""
    restored = RestoredWorkflow(id=workflow.id, endpoint_id=workflow.endpoint_id, started=False,
                                url=endpoint_url(context, workflow.endpoint_id))
    if workflow.stop_requested or not has_endpoint:
        return restored.model_copy(update={"note": "it was stopped before the backup; not started"})
    definition, revision, owner = await run_in_threadpool(_latest, context, workflow)
    try:
        await start_pool(context, client, workflow.id, workflow.endpoint_id, definition, owner,
                         conflict=WorkflowIDConflictPolicy.USE_EXISTING, revision=revision)
    except RPCError as error:
        return restored.model_copy(update={"note": f"Temporal refused to start it ({error.message})"})
    return restored.model_copy(update={"started": True})


def _latest(context: ServerContext, workflow: BackupWorkflow) -> tuple[WorkflowDefinition, int, Identity]:
    """The definition a restored pool starts from and its number, its latest revision's (what its owner last asked
    for; the pool serves it under that number, so the next rollout follows the revisions kept), and its owner as the
    store knows them now."""
    row = context.store.workflow(workflow.id)
    latest = context.store.revisions.latest(row)
    definition = WorkflowDefinition.model_validate(latest.definition)
    try:
        owner = context.store.identity(row.owner)
    except NotFoundError:  # a workflow outlives its owner's user row: it still runs as them
        owner = Identity(user=row.owner, org=row.org)
    return definition, latest.revision, owner
