"""A registered model's jobs and uses in the store: record a job (or join the one running), apply what a
job reports (only the current job's: a stale job's report is ignored), and the workflows that serve a
model (registering an hf:// model on its first use), which keep it from removal and its digest from
eviction."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from berth.contracts import (
    ModelJobRecord,
    ModelJobSpec,
    ModelProgress,
    ModelProgressReport,
    ModelRecord,
    ModelScope,
    ModelState,
    ModelStateReport,
)
from berth.errors import ConflictError, UserInputError
from berth.security import Identity
from catalog.entry import parse_hf_uri
from server.store.database import Store
from server.store.model_registry import MODEL_REF, ModelRegistry, record, resolution_order, visible
from server.store.secrets import check_covers
from server.store.tables import ModelRow, ModelUseRow

JOB_KINDS = ("materialize", "verify")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")
# A recorded job starts at its first step, so a second request finds it working and joins it.
_FIRST_STEP = {"materialize": ModelState.RESOLVING, "verify": ModelState.VERIFYING}


def hf_model_name(repo: str, revision: str | None) -> str:
    """The name an hf:// model gets when a workflow registers it on first use: `org--name`, and
    `org--name--revision` for a pinned revision ('/' and other characters a name may not hold become
    '-'), at most 128 characters. hf://HuggingFaceTB/SmolLM2-135M-Instruct → HuggingFaceTB--SmolLM2-135M-Instruct."""
    name = repo.replace("/", "--") + (f"--{_NOT_IN_NAME.sub('-', revision)}" if revision else "")
    return name[:128]


@dataclass(frozen=True)
class CachedDigest:
    """A digest in the registry, for the cache's eviction: the models that have it, when one was last used,
    and whether a running workflow serves it (then it is kept)."""

    digest: str
    models: list[str] = field(default_factory=list)
    last_used_at: float | None = None
    referenced: bool = False


class ModelUsage:
    def __init__(self, store: Store, registry: ModelRegistry | None = None) -> None:
        self.store = store
        self.registry = registry or ModelRegistry(store)

    # --- jobs -----------------------------------------------------------------------------------------
    def record_job(self, model_id: str, kind: str) -> tuple[ModelRecord, bool]:
        """Record a `kind` job for the model, or join the one running: (the record with its job_id, joined).
        One conditional UPDATE, so two API processes asking at once record one job."""
        if kind not in JOB_KINDS:
            raise UserInputError(f"A model job is one of {', '.join(JOB_KINDS)}, not '{kind[:32]}'.")
        job_id = f"model-{kind}-{model_id}-{secrets.token_hex(4)}"
        now = time.time()
        with self.store.session() as s:
            row = ModelRegistry.row_by_id(s, model_id)
            if row.hf_token_secret:  # registered before the rule: refused at the job, not spent
                check_covers(row.hf_token_secret, row.scope, "model")
            if kind == "verify" and row.digest is None:
                raise UserInputError(f"Model {row.name} has no digest to verify yet; `berth model materialize "
                                     f"{row.name}` first.")
            working = [state.value for state in ModelState.working()]
            done = s.execute(update(ModelRow).where(ModelRow.id == model_id, ModelRow.state.not_in(working))
                             .values(job_id=job_id, job_kind=kind, job_started_at=now, updated_at=now,
                                     state=_FIRST_STEP[kind].value, message=None, retries=0, progress=None)
                             .execution_options(synchronize_session=False))
        joined = not done.rowcount  # type: ignore[attr-defined]
        return self.registry.by_id(model_id), joined

    def jobs(self, who: Identity) -> list[ModelJobRecord]:
        """The current (or last) job of each model the caller may see, newest first."""
        with self.store.session() as s:
            rows = s.scalars(select(ModelRow).where(ModelRow.job_id.is_not(None))
                             .order_by(ModelRow.job_started_at.desc())).all()
            return [ModelJobRecord(job_id=row.job_id or "", model=row.name, model_id=row.id,
                                   kind=row.job_kind or "materialize", state=ModelState(row.state),
                                   message=row.message, retries=row.retries,
                                   progress=ModelProgress.model_validate(row.progress) if row.progress else None,
                                   started_at=row.job_started_at or row.created_at, updated_at=row.updated_at)
                    for row in rows if visible(row, who)]

    def job_spec(self, model_id: str) -> ModelJobSpec:
        with self.store.session() as s:
            row = ModelRegistry.row_by_id(s, model_id)
            return ModelJobSpec(model=record(s, row), signature=row.signature, hf_token_secret=row.hf_token_secret,
                                job_kind=row.job_kind)

    def apply_state(self, model_id: str, report: ModelStateReport) -> bool:
        """Apply a job's step or end to the model; False (nothing changed) when `report` is from a job
        that is not the model's current one, as after a newer job was recorded."""
        now = time.time()
        with self.store.session() as s:
            row = ModelRegistry.row_by_id(s, model_id)
            if row.job_id != report.job_id:
                return False
            row.state = report.state.value
            for name in ("message", "retries", "commit", "digest", "verified", "size_bytes", "files",
                         "safetensors_files"):
                value = getattr(report, name)
                if value is not None:
                    setattr(row, name, value)
            if report.state is ModelState.READY:
                row.message = None
                row.verified_at = now
                if row.job_kind == "materialize":
                    row.materialized_at = now
            row.updated_at = now
            return True

    def apply_progress(self, model_id: str, report: ModelProgressReport) -> bool:
        """Record a download's progress; False when the report is from a stale job."""
        with self.store.session() as s:
            row = ModelRegistry.row_by_id(s, model_id)
            if row.job_id != report.job_id:
                return False
            row.progress = report.progress.model_dump(mode="json")
            row.updated_at = time.time()
            return True

    # --- uses -----------------------------------------------------------------------------------------
    def use(self, who: Identity, ref: str, workflow_id: str) -> ModelRecord:
        """The model `ref` names for `who` (model://NAME, or hf://org/name[@revision]: the visible model of
        that source, else registered now in their user scope under `hf_model_name`), recorded as served by
        `workflow_id` until `release`."""
        with self.store.session() as s:
            if MODEL_REF.match(ref):
                row = self.registry.row(s, who, ref)
            elif ref.startswith("hf://"):
                row = self._hf_row(s, who, ref)
            else:
                raise UserInputError(f"A model reference is model://NAME or hf://org/name[@revision], not "
                                     f"'{ref[:200]}'.")
            now = time.time()
            if s.get(ModelUseRow, (row.id, workflow_id)) is None:
                s.add(ModelUseRow(model_id=row.id, workflow_id=workflow_id, since=now))
            row.last_used_at = now
            s.flush()
            return record(s, row)

    def _hf_row(self, session: Session, who: Identity, ref: str) -> ModelRow:
        repo, revision = parse_hf_uri(ref)
        source = f"hf://{repo}" + (f"@{revision}" if revision else "")
        rows = session.scalars(select(ModelRow).where(ModelRow.source == source)).all()
        order = {pair: rank for rank, pair in enumerate(resolution_order(who))}
        mine = sorted((r for r in rows if (r.scope, r.owner_key) in order), key=lambda r: order[(r.scope, r.owner_key)])
        if mine:
            return mine[0]
        name = hf_model_name(repo, revision)
        taken = session.scalars(select(ModelRow).where(ModelRow.scope == ModelScope.USER.value,
                                                       ModelRow.owner_key == who.user,
                                                       ModelRow.name == name)).one_or_none()
        if taken is not None:
            raise ConflictError(f"{ref[:200]} would be registered as your model '{name}', but that name is "
                                f"{taken.source}; use model://NAME, or rename yours.")
        now = time.time()
        row = ModelRow(id=f"mdl-{secrets.token_hex(6)}", name=name, scope=ModelScope.USER.value, owner_key=who.user,
                       owner=who.user, org=who.org, groups=list(who.groups), source=source, repo=repo,
                       revision=revision, state=ModelState.REGISTERED.value, retries=0, require_checksum=False,
                       format="safetensors", size_bytes=0, files=0, safetensors_files=0, verified=False,
                       created_at=now, updated_at=now)
        session.add(row)
        session.flush()
        return row

    def release(self, workflow_id: str) -> int:
        """The workflow serves its models no longer; how many uses were removed."""
        with self.store.session() as s:
            done = s.execute(delete(ModelUseRow).where(ModelUseRow.workflow_id == workflow_id))
            return int(done.rowcount)  # type: ignore[attr-defined]

    # --- the cache ------------------------------------------------------------------------------------
    def cached_digests(self) -> list[CachedDigest]:
        """Every digest the registry knows, oldest use first (never used first), for the eviction."""
        with self.store.session() as s:
            rows = s.scalars(select(ModelRow).where(ModelRow.digest.is_not(None))).all()
            used = set(s.scalars(select(ModelUseRow.model_id)).all())
            by_digest: dict[str, list[ModelRow]] = {}
            for row in rows:
                by_digest.setdefault(row.digest or "", []).append(row)
        entries = []
        for digest, group in by_digest.items():
            times = [r.last_used_at for r in group if r.last_used_at is not None]
            entries.append(CachedDigest(digest=digest, models=sorted(r.name for r in group),
                                        last_used_at=max(times) if times else None,
                                        referenced=any(r.id in used for r in group)))
        return sorted(entries, key=lambda e: (e.last_used_at or 0.0, e.digest))

    def using_workflows(self) -> list[str]:
        """Every workflow that holds a use of a model now."""
        with self.store.session() as s:
            return sorted(set(s.scalars(select(ModelUseRow.workflow_id)).all()))

    def referenced_digests(self) -> set[str]:
        return {entry.digest for entry in self.cached_digests() if entry.referenced}

    def mark_evicted(self, digest: str) -> int:
        """The cache dropped `digest`'s bytes: its Ready models go back to Registered (the record, commit and
        digest remain, so it can be materialized again)."""
        with self.store.session() as s:
            done = s.execute(update(ModelRow).where(ModelRow.digest == digest,
                                                    ModelRow.state == ModelState.READY.value)
                             .values(state=ModelState.REGISTERED.value, progress=None, updated_at=time.time())
                             .execution_options(synchronize_session=False))
            return int(done.rowcount)  # type: ignore[attr-defined]

