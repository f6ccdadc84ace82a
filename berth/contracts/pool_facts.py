"""PoolFacts: what an endpoint row keeps about its pool in its annotations, written once at submission (and by a
rollout's switch) and read back as attributes by routing, discovery, the autoscaler and OpenCode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Strict, ValidationError

from berth.sites import route_rank


class SiteRouting(BaseModel):
    """A pool's site values as `site_local` routing reads them (issue 36; berth/sites.py `route_rank`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    preferred: str = ""  # PreferredSite
    failover: tuple[str, ...] = ()  # FailoverSites: where a saturated preferred site spills
    allowed: tuple[str, ...] = ()  # AllowedSites
    residency: str = ""  # Residency (a registered model's, copied at submission)

    def rank(self, site: str | None) -> int | None:
        """How site_local ranks a copy at `site` (berth/sites.py `route_rank`)."""
        return route_rank(site, self.preferred, self.failover, self.allowed, self.residency)


class PoolFacts(BaseModel):
    """A pool's facts, under the keys (and in the order) the endpoint row's annotations have always held them.

    Every field is defaulted as its readers defaulted a missing key, so a row written by an older stack (fewer
    keys) still reads. A service endpoint has none: `pool` is False and its annotations hold no fact."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pool: bool = False  # the endpoint serves a pool of copies (not a service: the gateway, OpenCode)
    proxy: bool = True  # behind its own LiteLLM proxy (Proxy=true); Proxy=false pools are discoverable
    routing_policy: str | None = None  # gateway.routing.POLICIES; None on a service endpoint
    min_replicas: int = 1
    max_replicas: int = 1
    target_requests_per_s: float = 0.0  # 0: no rate autoscaling
    target_concurrency: float = 0.0
    scale_down_delay_s: float = 60.0
    scale_to_zero_after_s: float = 300.0
    scale_out_queue: float = 0.0
    scale_out_s: float = 30.0
    scale_out_ttft_ms: float = 0.0
    scale_in_queue: float = 0.0
    scale_in_s: float = 120.0
    # The serving revision's MaxContextSize. Strict: a stray boolean was never read as a context size.
    max_context: Annotated[int, Strict()] | None = None
    # Its site values (None: it sets none); written only when set, so a row without them reads and writes as before.
    sites: SiteRouting | None = None

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, Any] | None) -> PoolFacts:
        """The facts an endpoint row's annotations hold (the row's other keys ignored). A value of the wrong
        type reads as its default, as the readers before this model did, rather than failing the reader."""
        fields = _FIELDS  # not cls.model_fields in the loop: pydantic's class property costs ~1 µs a read
        known = {name: value for name, value in (annotations or {}).items() if name in fields}
        try:
            return cls.model_validate(known)
        except ValidationError as error:
            wrong = {str(problem["loc"][0]) for problem in error.errors() if problem["loc"]}
            return cls.model_validate({name: value for name, value in known.items() if name not in wrong})

    def as_annotations(self) -> dict[str, Any]:
        """The annotations these facts write: every key for a pool, none for a service endpoint."""
        if not self.pool:
            return {}
        return self.model_dump(mode="json", exclude={"sites"} if self.sites is None else None)

    @property
    def discoverable(self) -> bool:
        """A Proxy=false pool: a discovering gateway calls its copies directly (a Proxy=true pool's sit behind
        LiteLLM and its key)."""
        return self.pool and not self.proxy


_FIELDS: frozenset[str] = frozenset(PoolFacts.model_fields)
