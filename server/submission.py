"""A submission, from request to the rows and input a workflow starts with: its values, image, engine
flags, secret references and capacity checked; its generated passwords and keys; its endpoint's facts."""

from __future__ import annotations

import re
import secrets
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from berth.contracts import PoolFacts
from berth.contracts.pool_facts import SiteRouting
from berth.errors import NotFoundError
from berth.kinds import facts
from berth.opencode import generate_password
from berth.security import Identity, generate_api_key
from catalog.definition import SitePick, WorkflowDefinition
from catalog.engine_flags import refuse_code_flags
from catalog.entry import Entry, find_entry
from catalog.images import refuse_image
from catalog.render import render, resolve_values
from server.capacity import check_capacity
from server.kind_checks import check_kind
from server.model_refs import registered_model, served_from_registry
from server.policy_check import check_deploy, subject_of
from server.policy_rules import Subject
from server.site_values import refuse_sites_on_slurm, with_model_residency
from server.slurm_fit import check_slurm_fit, refuse_slurm_pick
from server.store.database import name_taken
from server.store.secrets import Secrets, check_references
from server.store.tables import EndpointRow, WorkflowRow
from workflows.payloads import CopyTimings

if TYPE_CHECKING:
    from server.context import ServerContext


# A name the caller chooses is the workflow's ID: a DNS-label-like word, so that it is safe in URL paths,
# Temporal IDs and container names alike.
WORKFLOW_NAME = re.compile(r"^[a-z][a-z0-9-]{1,62}$")


class StartRequest(BaseModel):
    entry: str
    values: dict[str, Any] = {}
    # The workflow's ID; None: the entry's slug and a random suffix. Checked below with its own message.
    name: str | None = Field(default=None, json_schema_extra={"pattern": WORKFLOW_NAME.pattern})

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        if name is not None and not WORKFLOW_NAME.fullmatch(name):
            raise ValueError("name: 2 to 63 characters of a-z, 0-9 and '-', starting with a letter")
        return name


def prepare(context: ServerContext, body: StartRequest, who: Identity,
            owner: Subject | None = None) -> tuple[Entry, WorkflowDefinition]:
    """A submission's entry and its rendered definition, once its values, secret references, policies (as
    `owner`'s, the caller's by default: a rollout is checked as its workflow's owner's) and capacity are checked.
    CPU work that reads the store: call it off the event loop."""
    entry = find_entry(body.entry)
    if body.name is not None:
        refuse_taken_name(context, body.name)
    given, model = registered_model(context, body.values, who)
    values = resolve_values(entry, with_model_residency(entry, given, model))
    definition = served_from_registry(render(entry, values), model)
    if definition.replica is not None:
        refuse_code_flags("ExtraArgs", definition.replica.engine.extra_args, context.settings.allow_trust_remote_code)
    refuse_image(entry, values, context.settings.container_runtime)
    check_deploy(context, owner or subject_of(who), definition, body.values, values)
    if context.settings.placement_backend == "slurm":
        refuse_sites_on_slurm(definition)
        check_slurm_fit(context, definition)  # Slurm's nodes, not Berth's, decide (issue 35)
    else:
        refuse_slurm_pick(definition)
        check_capacity(context, entry, definition)
    check_references(Secrets(context.store), who, entry, values)
    check_kind(context.store, definition, context.settings.proxy_url)
    return entry, definition


def refuse_taken_name(context: ServerContext, name: str) -> None:
    """Refuse a name some workflow already has, whoever owns it: the answer says only that it is taken."""
    try:
        context.store.workflow(name)
    except NotFoundError:
        return
    raise name_taken(name)


def with_generated_keys(definition: WorkflowDefinition) -> WorkflowDefinition:
    """The definition with what Berth generates when the submission left it out: OpenCode's server
    password, and the master key of a gateway or of a pool's LiteLLM proxy."""
    front = facts(definition.front_kind) if definition.front_kind else None
    if front is not None and front.generates_password and definition.service is not None \
            and not definition.service.options.get("password"):
        # The documents: the server password sits in the definition, readable by whoever reads it.
        service = definition.service.model_copy(
            update={"options": {**definition.service.options, "password": generate_password()}})
        definition = definition.model_copy(update={"service": service})
    keyless = not (definition.api_key or definition.api_key_secret)
    # The documents: a generated key is the gateway's (or the LiteLLM proxy's) master key, in the definition.
    if keyless and front is not None and front.generates_key:
        definition = definition.model_copy(update={"api_key": generate_api_key()})
    return definition


def new_rows(entry: Entry, definition: WorkflowDefinition, who: Identity,
             name: str | None = None) -> tuple[WorkflowRow, EndpointRow]:
    """The workflow's row and its endpoint's: the workflow under `name` when given, else a fresh ID."""
    workflow_id = name or f"{entry.slug}-{secrets.token_hex(4)}"
    endpoint_id = f"ep-{secrets.token_hex(5)}"
    now = time.time()
    row = WorkflowRow(id=workflow_id, entry=entry.name, owner=who.user, org=who.org, created_at=now,
                      definition="", endpoint_id=endpoint_id)
    # A pool behind a LiteLLM proxy is reached only through it: the proxy answers 503 until it is up.
    service_entry = definition.service is not None and definition.replica is None
    endpoint = EndpointRow(id=endpoint_id, workflow_id=workflow_id, service=definition.endpoint_kind.value,
                           scope=definition.endpoint.scope.value, owner=who.user, org=who.org,
                           groups=list(who.groups),
                           # A service entry's endpoint serves no model of its own (OpenCode's Model
                           # is what it asks for): keep it out of model discovery.
                           model_id=None if service_entry else definition.model_id, created_at=now,
                           annotations=pool_facts(definition).as_annotations())
    return row, endpoint


def pool_facts(definition: WorkflowDefinition) -> PoolFacts:
    """What the endpoint row keeps about its pool, for routing, discovery and the autoscaler (none for a
    service endpoint)."""
    if definition.replica is None:
        return PoolFacts()
    pool = definition.pool
    return PoolFacts(pool=True, proxy=definition.proxy, routing_policy=pool.routing_policy,
                     min_replicas=pool.min_replicas, max_replicas=pool.max_replicas,
                     target_requests_per_s=pool.target_requests_per_s, target_concurrency=pool.target_concurrency,
                     scale_down_delay_s=pool.scale_down_delay_s, scale_to_zero_after_s=pool.scale_to_zero_after_s,
                     scale_out_queue=pool.scale_out_queue, scale_out_s=pool.scale_out_s,
                     scale_out_ttft_ms=pool.scale_out_ttft_ms, scale_in_queue=pool.scale_in_queue,
                     scale_in_s=pool.scale_in_s, max_context=definition.replica.engine.max_model_len,
                     sites=site_routing(definition.replica.sites))


def site_routing(sites: SitePick | None) -> SiteRouting | None:
    """The pool's site values that routing reads (site_local)."""
    if sites is None:
        return None
    return SiteRouting(preferred=sites.preferred, failover=sites.failover, allowed=sites.allowed,
                       residency=sites.residency)


def copy_timings(context: ServerContext) -> CopyTimings:
    settings = context.settings
    return CopyTimings(rank_heartbeat_timeout_s=settings.rank_heartbeat_timeout_s,
                       rank_adopt_window_s=settings.rank_adopt_window_s,
                       health_check_interval_s=settings.health_check_interval_s,
                       health_check_timeout_s=settings.health_check_timeout_s,
                       health_failures_to_fail=settings.health_failures_to_fail,
                       replace_backoff_s=settings.replace_backoff_s,
                       replace_backoff_max_s=settings.replace_backoff_max_s)
