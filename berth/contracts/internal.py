"""Internal answers (`/v1/internal/...`): tokens for Berth's own services, the copies' keys a gateway
reads, a pool's copy list for its LiteLLM sync hook, and the routing table the endpoint proxy reads.

The LiteLLM venv imports this module too (gateway.litellm_hooks.replica_sync): pydantic and the standard library
only."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from berth.contracts.base import INT32_MAX, INT64_MAX, OpenResponse, Payload, Renamed, Response, formerly
from berth.contracts.limits import LimitPolicy
from berth.contracts.rollouts import CopyOutcomes


class Jwks(OpenResponse):
    """A JSON Web Key Set (RFC 7517): the signing keys' public halves."""

    keys: list[dict[str, Any]]


class ServiceToken(Response):
    token: str = Field(repr=False)


class OwnerToken(Response):
    token: str = Field(repr=False)
    expires_at: float


class ReplicaKeysToken(Response):
    token: str = Field(repr=False)


class ReplicaKeysList(Response):
    """copy id → key, for every published copy of a Proxy=false pool the gateway's owner may reach."""

    keys: dict[str, str] = Field(default_factory=dict, repr=False)


class ServiceCopy(Response, Renamed):
    """One copy of a pool as its LiteLLM sync hook routes to it. `id` is the old name of `copy_id`
    (deprecated; emitted too for one release: the hook of a pool started before reads it)."""

    # hide_input_in_errors: a malformed list must not put a copy's key into the warning it causes.
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    copy_id: str = formerly("id", "copy_id")
    url: str  # the copy's OpenAI base, with /v1
    ready: bool
    api_key: str = Field(default="", repr=False)  # the copy's vLLM key: never logged
    site_rank: Literal[0, 1] | None = 0  # as RouteCopy's: how site_local ranks it (None: never)


class ServiceCopies(Response, Renamed):
    """The body of a pool's `/v1/internal/endpoints/{id}/replicas` (its sync hook's BERTH_REPLICAS_URL).
    `replicas` is the old name of `copies` (deprecated; emitted too for one release)."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    copies: list[ServiceCopy] = formerly("replicas", "copies")
    routing_policy: str = ""  # empty: gateway.edge.routing's default


class RouteCopy(Response):
    """One published copy of a pool as the endpoint proxy routes to it (only this admin route carries
    its key)."""

    copy_id: str
    url: str
    ready: bool = True
    draining: bool = False
    api_key: str = Field(default="", repr=False)
    revision: int = 1  # the workflow revision it serves: `traffic` splits by it
    # The watts its GPUs draw as their nodes' heartbeats last read them through NVML (server/store/gpu_power.py):
    # sent only for an energy_optimized pool's copies, and only where every GPU of the copy has a reading.
    power_w: Annotated[float | None, Field(ge=0)] = None
    # Its rank-0 node's site, and how `site_local` ranks it (berth/sites.py `route_rank`): 0 the preferred site (or
    # no preference), 1 a failover site, None never (outside residency or the allowed sites, or any other site).
    # Sent only where a site is known or a site rule applies: a copy without them reads as before (rank 0).
    site: str | None = None
    site_rank: Literal[0, 1] | None = 0


class RouteEntry(Response, Renamed):
    """One endpoint in the proxy's routing table: who may call it, where its service or ready copies
    listen, and its pool as routing needs it. `replicas` is the old name of `copy_urls` (deprecated;
    emitted too for one release)."""

    id: str
    scope: str
    owner: str
    org: str
    groups: list[str] = []
    service: str = "vllm"
    service_url: str | None = None
    copy_urls: list[str] = formerly("replicas", "copy_urls", [])  # the URLs of its ready, undrained copies
    workflow_id: str = ""
    pool: list[RouteCopy] = []
    routing_policy: str | None = None
    wakeable: bool = False  # a pool with no copy may be woken by a request
    litellm_routed: list[str] | None = None  # behind LiteLLM: the copies it routes to (None: not yet told)
    # The endpoint's `limits` annotation: its override of the cluster's limits, the fields it sets only
    # (sent only when there is one, so a table without overrides reads as before).
    limits: LimitPolicy | None = None
    max_context: int | None = None  # the pool's MaxContextSize (sent only when known)
    # A rollout's split: revision → percent of requests (sent only while one is set; None: by copy count).
    traffic: dict[int, int] | None = None
    # The ids of its endpoint tokens revoked before they expire: the proxy refuses them (sent only while there
    # is one; an expired token is refused by its signature's `exp` and leaves the list).
    revoked_tokens: list[str] | None = None


class RoutesTable(Response):
    endpoints: list[RouteEntry]


class Health(Response):
    """`/healthz`: the API process answers."""

    status: str


# --- requests ------------------------------------------------------------------------------------------
class RequestCounters(Payload, Renamed):
    """What the LiteLLM sync hook posts (gateway.litellm_hooks.replica_sync.RequestSnapshot; other fields ignored).
    `replicas` is the old name of `copies` (deprecated; read too for one release)."""

    pid: int = Field(ge=-INT32_MAX - 1, le=INT32_MAX)
    started_at: float
    requests_total: int = Field(ge=-INT64_MAX - 1, le=INT64_MAX)
    copies: tuple[str, ...] = formerly("replicas", "copies", ())  # copy ids LiteLLM routes to now


class TokenLapse(Payload):
    expires_at: float


class OwnerTokenRequest(Payload):
    endpoint_id: str | None = None
    ttl_s: int = 7 * 24 * 3600


MAX_SCRAPE_REPORT = 4096  # copies one endpoint proxy reports at once: far more than it routes to


class CopyScrape(Payload):
    """What one endpoint proxy last saw of a copy's /metrics, as ages on its own clock (the API's differs)."""

    scraped_ago_s: float | None = Field(None, ge=0, le=1e9)  # since the last good scrape; None: never
    failed_ago_s: float | None = Field(None, ge=0, le=1e9)  # since the last failed scrape or connect; None: none


class ScrapeReport(Payload):
    """Every copy an endpoint proxy routes to, and how fresh its figures are there (explain routing reads it)."""

    copies: dict[str, CopyScrape] = Field(default_factory=dict, max_length=MAX_SCRAPE_REPORT)


class LoadReport(Payload):
    requests: int = Field(ge=-INT64_MAX - 1, le=INT64_MAX)  # requests the endpoint proxy admitted since its last report
    copies: dict[str, CopyOutcomes] = {}  # how each copy answered them (a canary is judged on these)
