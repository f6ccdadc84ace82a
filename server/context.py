"""What every route reaches through a dependency: the server's context (state dir, settings, store, keys,
Temporal), on `app.state`, set once by `create_app`. Nothing else lives in the API process: load reports
go to the store (server/store/load_reports.py), so any number of API replicas serve alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from berth.contracts import EvictRequest, EvictResult, LimitPolicy, ModelRecord
from berth.errors import UnavailableError
from berth.security import Cipher, ReplicaKeys, SigningKey, TokenVerifier
from berth.settings import ClusterSettings, SlurmSettings, StateLayout
from berth.temporal import connect
from server.store.api_keys import ApiKeys
from server.store.database import Store
from server.store.token_registry import TokenRegistry
from server.submission_slots import SubmissionSlots

# Where the model routes hand work to the model jobs (issue 16): start the job `job_id` of `kind`
# (materialize | verify) for the model, or join it when it runs already (the starter is idempotent per
# job_id); and evict the managed cache down to a budget. None: this control plane runs no model jobs, and
# those routes answer 503.
# (context, record, kind, job id, waiter): a waiter is a workflow to tell each step of the job.
ModelJobStarter = Callable[["ServerContext", ModelRecord, str, str, str | None], Awaitable[None]]
ModelCacheEvictor = Callable[["ServerContext", EvictRequest], Awaitable[EvictResult]]


@dataclass
class ServerContext:
    state: StateLayout
    settings: ClusterSettings
    store: Store
    signing: SigningKey
    verifier: TokenVerifier
    cipher: Cipher
    temporal_address: str
    tokens: TokenRegistry
    replica_keys: ReplicaKeys  # each copy's vLLM key, for Berth's own callers of copies only
    api_keys: ApiKeys  # users' `bk_…` keys (issue 15)
    # The cluster's limits (BERTH_LIMITS_FILE, read once at start, as the proxies read it): what an
    # endpoint's owner may only tighten with its policy.
    limits: LimitPolicy = field(default_factory=LimitPolicy)
    # Where Slurm places copies (placement_backend slurm): its settings, read once at start like the others.
    slurm: SlurmSettings = field(default_factory=lambda: SlurmSettings.model_validate({}))
    model_jobs: ModelJobStarter | None = None
    model_cache_evict: ModelCacheEvictor | None = None
    # Submissions checked and rendered at once by this API process: two, one per user (server/submission_slots.py).
    submissions: SubmissionSlots = field(default_factory=SubmissionSlots)
    # When this API process last checked the usage budgets on the autoscaler's tick (server/usage_report.py).
    budgets_checked_at: float = 0.0
    _temporal: Client | None = None

    async def temporal(self) -> Client:
        if self._temporal is None:
            try:
                self._temporal = await connect(self.temporal_address, self.cipher)
            except RuntimeError as error:
                raise UnavailableError(
                    f"Cannot reach Temporal at {self.temporal_address} ({error}). Is the stack up (`berth status`)?"
                ) from None
        return self._temporal


async def server_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


Context = Annotated[ServerContext, Depends(server_context)]
