"""The model registry's store: register a model (an hf:// repository or a pre-staged directory under an
allowed model dir), list and find what a caller may see, describe and remove one. Names are unique per
scope, as secrets' are: user (the caller's own), group (one of theirs) or organization.

`model://NAME` resolves for a user to their own model of that name first, then the first of their
groups (in the order their identity lists them) that has one, then their organization's. Jobs, reports
and uses are server/store/model_usage.py."""

from __future__ import annotations

import re
import secrets
import time

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from berth.contracts import ModelCreate, ModelFormat, ModelProgress, ModelRecord, ModelScope, ModelState
from berth.errors import ConflictError, NotFoundError, PermissionDeniedError, UserInputError
from berth.model_paths import allowed_model_dirs, staged_path
from berth.security import Identity
from catalog.entry import parse_hf_uri
from server.store.database import Store
from server.store.secrets import check_covers, owner_key
from server.store.tables import ModelRow, ModelUseRow, NodeRow

MODEL_REF = re.compile(r"^model://([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")


def resolution_order(who: Identity) -> list[tuple[str, str]]:
    """(scope, owner key) pairs in resolution order: the user, their groups, their organization."""
    return ([(ModelScope.USER.value, who.user)] + [(ModelScope.GROUP.value, g) for g in who.groups]
            + [(ModelScope.ORGANIZATION.value, who.org)])


def visible(row: ModelRow, who: Identity) -> bool:
    return who.admin or (row.scope, row.owner_key) in set(resolution_order(who))


def _cached_digests(session: Session) -> set[str]:
    return {digest for models in session.scalars(select(NodeRow.models)).all() for digest in (models or [])}


def record(session: Session, row: ModelRow, cached: set[str] | None = None) -> ModelRecord:
    cached = _cached_digests(session) if cached is None else cached
    users = session.scalars(select(ModelUseRow.workflow_id).where(ModelUseRow.model_id == row.id)
                            .order_by(ModelUseRow.workflow_id)).all()
    return ModelRecord(
        id=row.id, name=row.name, scope=ModelScope(row.scope), owner=row.owner, owner_key=row.owner_key,
        source=row.source, repo=row.repo, revision=row.revision, path=row.path, commit=row.commit,
        digest=row.digest, state=ModelState(row.state), message=row.message, retries=row.retries,
        require_checksum=row.require_checksum, signed=row.signature is not None, verified=row.verified,
        license=row.license, residency=row.residency, format=ModelFormat(row.format),
        allow_patterns=list(row.allow_patterns or []), ignore_patterns=list(row.ignore_patterns or []),
        size_bytes=row.size_bytes,
        files=row.files, safetensors_files=row.safetensors_files,
        cached=row.digest is not None and row.digest in cached,
        progress=ModelProgress.model_validate(row.progress) if row.progress else None, job_id=row.job_id,
        referenced_by=list(users), created_at=row.created_at, updated_at=row.updated_at,
        materialized_at=row.materialized_at, verified_at=row.verified_at, last_used_at=row.last_used_at)


class ModelRegistry:
    def __init__(self, store: Store, model_dirs: str = "") -> None:
        self.store = store
        self.model_dirs = allowed_model_dirs(model_dirs)

    def add(self, who: Identity, body: ModelCreate) -> ModelRecord:
        """Register a model in the caller's scope; the name must be free there."""
        repo = revision = path = None
        if body.source.startswith("hf://"):
            repo, revision = parse_hf_uri(body.source, "--source")
            source = f"hf://{repo}" + (f"@{revision}" if revision else "")
        else:
            path = str(staged_path(body.source, self.model_dirs))
            source = path
            if body.allow_patterns or body.ignore_patterns:
                raise UserInputError("--include and --exclude choose an hf:// repository's files; a pre-staged "
                                     "directory is the model as it lies (stage only the files to serve).")
        if body.hf_token_secret is not None:
            check_covers(body.hf_token_secret, body.scope.value, "model")
        key = owner_key(body.scope.value, who, body.group, what="model")
        now = time.time()
        row = ModelRow(id=f"mdl-{secrets.token_hex(6)}", name=body.name, scope=body.scope.value, owner_key=key,
                       owner=who.user, org=who.org, groups=list(who.groups), source=source, repo=repo,
                       revision=revision, path=path, state=ModelState.REGISTERED.value, retries=0,
                       require_checksum=body.require_checksum, signature=body.signature, license=body.license,
                       residency=body.residency, format=body.format.value, hf_token_secret=body.hf_token_secret,
                       allow_patterns=list(body.allow_patterns), ignore_patterns=list(body.ignore_patterns),
                       size_bytes=0, files=0, safetensors_files=0, verified=False, created_at=now, updated_at=now)
        try:
            with self.store.session() as s:
                s.add(row)
                s.flush()
                return record(s, row)
        except IntegrityError:
            raise ConflictError(f"A {body.scope.value} model named '{body.name}' already exists for {key}; "
                                "choose another name, or `berth model remove` it first.") from None

    def list(self, who: Identity) -> list[ModelRecord]:
        """What the caller may see (an administrator: every model), by name."""
        with self.store.session() as s:
            rows = s.scalars(select(ModelRow).order_by(ModelRow.name, ModelRow.scope)).all()
            cached = _cached_digests(s)
            return [record(s, row, cached) for row in rows if visible(row, who)]

    def find(self, who: Identity, name: str) -> ModelRecord:
        """The model `name` (or `model://name`) names for `who`, by the resolution order above."""
        with self.store.session() as s:
            return record(s, self.row(s, who, name))

    def row(self, session: Session, who: Identity, name: str) -> ModelRow:
        match = MODEL_REF.match(name)
        name = match.group(1) if match else name
        for scope, key in resolution_order(who):
            found = session.scalars(select(ModelRow).where(ModelRow.scope == scope, ModelRow.owner_key == key,
                                                           ModelRow.name == name)).one_or_none()
            if found is not None:
                return found
        if who.admin:  # an administrator reaches anyone's model: the oldest of that name
            found = session.scalars(select(ModelRow).where(ModelRow.name == name)
                                    .order_by(ModelRow.created_at)).first()
            if found is not None:
                return found
        raise NotFoundError(f"No model named '{name[:128]}'. `berth model list` shows the models you can use.")

    def by_id(self, model_id: str) -> ModelRecord:
        with self.store.session() as s:
            return record(s, self.row_by_id(s, model_id))

    @staticmethod
    def row_by_id(session: Session, model_id: str) -> ModelRow:
        row = session.get(ModelRow, model_id)
        if row is None:
            raise NotFoundError(f"No model with id '{model_id[:64]}'.")
        return row

    def remove(self, who: Identity, name: str) -> ModelRecord:
        """Remove a model (its owner or an administrator), refused while a running workflow serves it."""
        with self.store.session() as s:
            row = self.row(s, who, name)
            if not who.admin and row.owner != who.user:
                raise PermissionDeniedError(f"Model {row.name} was registered by {row.owner}: only they or an "
                                            "administrator may remove it.")
            answer = record(s, row)
            if answer.referenced_by:
                raise ConflictError(f"Model {row.name} is served by running workflows "
                                    f"{', '.join(answer.referenced_by)}; stop them first.")
            s.delete(row)
            return answer
