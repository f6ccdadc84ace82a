"""How the API shows what the store holds: endpoints with their replicas, GPUs as `node list` shows them,
catalog entries, users. Pure functions of rows; no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from berth import kinds
from berth.contracts import PoolFacts
from berth.contracts.rollouts import ScalingExplanation
from berth.security import Identity
from catalog.entry import Entry
from catalog.memory import gpus_needed, memory_need, memory_table
from server.gpu_health import SKIP_NONE, GpuHealthRule
from server.store.tables import EndpointRow

if TYPE_CHECKING:
    from server.context import ServerContext

# vLLM takes this share of a GPU's memory (--gpu-memory-utilization): what a simulated GPU reports used.
SIMULATED_USED_SHARE = 0.9


def endpoint_url(context: ServerContext, endpoint_id: str) -> str:
    return f"{context.settings.proxy_url.rstrip('/')}/endpoints/{endpoint_id}"


def replica_view(replica: Any) -> dict[str, Any]:
    return {"copy_id": replica.copy_id, "url": replica.url, "ready": bool(replica.ready),
            "draining": bool(replica.draining)}


def discoverable(endpoint: EndpointRow) -> bool:
    """Whether a discovering gateway serves this endpoint's pool: a pool started with Proxy=false."""
    return PoolFacts.from_annotations(endpoint.annotations).discoverable


def endpoint_view(context: ServerContext, endpoint: EndpointRow, replicas: list[Any]) -> dict[str, Any]:
    """An endpoint as the endpoints API lists it, with its per-replica addresses and discovery annotations.

    A Proxy=true pool is not discoverable: its replicas sit behind LiteLLM and its key, so a gateway
    must not route around them; `discoverable` says so and `not_discoverable_reason` says why."""
    mine = sorted((replica_view(r) for r in replicas if r.endpoint_id == endpoint.id),
                  key=lambda r: r["copy_id"])
    ready = [r for r in mine if r["ready"] and not r["draining"]]
    facts = PoolFacts.from_annotations(endpoint.annotations)
    found = facts.discoverable
    annotations: dict[str, Any] = {
        "model_id": endpoint.model_id, "workflow_id": endpoint.workflow_id, "owner": endpoint.owner,
        "scope": endpoint.scope, "ready": bool(ready), "discoverable": found,
        "routing_policy": facts.routing_policy,
    }
    if facts.pool and not found:
        annotations["not_discoverable_reason"] = (
            "started with Proxy=true: its replicas are behind its LiteLLM proxy; restart the model with "
            "Proxy=false to make it discoverable by a gateway")
    return {
        "id": endpoint.id, "workflow_id": endpoint.workflow_id, "service": endpoint.service,
        "url": endpoint_url(context, endpoint.id), "scope": endpoint.scope, "owner": endpoint.owner,
        # Behind LiteLLM: ready when the proxy is up and has a replica to route to.
        "model_id": endpoint.model_id,
        "ready": (bool(endpoint.service_url) and bool(ready)) if kinds.facts(endpoint.service).fronts_pool
        else bool(ready) or bool(endpoint.service_url),
        "ready_copies": len(ready), "copies": mine if found else [], "annotations": annotations,
        # Their old names, for one release (berth.contracts.EndpointView).
        "ready_replicas": len(ready), "replicas": mine if found else [],
    }


def gpu_row(gpu: dict[str, Any], copy_id: str | None, health: GpuHealthRule = SKIP_NONE) -> dict[str, Any]:
    """One GPU as `node list` shows it. NVML reports free memory itself; a simulated GPU is free
    whole, or for the share vLLM leaves once a copy holds it. `unhealthy` only where `health` skips it."""
    row = {**gpu, "allocated_to": copy_id}
    unhealthy = health.unhealthy(gpu)
    if unhealthy is not None:
        row["unhealthy"] = unhealthy
    total = float(gpu.get("memory_gb", 0))
    if gpu.get("simulated") or "memory_free_gb" not in gpu:
        row["memory_free_gb"] = round(total * (1 - SIMULATED_USED_SHARE), 1) if copy_id else total
    row["id"] = gpu.get("uuid") or gpu.get("pci_bus_id")
    return row


def entry_summary(entry: Entry) -> dict[str, Any]:
    return {"name": entry.name, "description": entry.description, "category": entry.category,
            "tags": list(entry.tags), "kind": entry.kind}


def entry_detail(entry: Entry) -> dict[str, Any]:
    """An entry's summary, its parameters and, for model entries, the facts and the memory table."""
    detail = entry_summary(entry)
    detail["parameters"] = [p.model_dump(mode="json") for p in entry.parameters]
    if entry.model is not None:
        facts = entry.model
        detail["model"] = facts.model_dump(mode="json")
        detail["memory"] = [row.as_json() for row in memory_table(facts)]
        default_gpus = entry.parameter("GpusPerNode").default
        detail["default_gpus_per_node"] = (
            default_gpus if default_gpus is not None
            else gpus_needed(memory_need(facts, facts.default_context).total_gb)
        )
    return detail


def user_json(identity: Identity) -> dict[str, Any]:
    return {"name": identity.user, "org": identity.org, "groups": list(identity.groups), "admin": identity.admin}


def scaling_of(endpoint: EndpointRow | None) -> ScalingExplanation | None:
    """The autoscaler's last explanation an endpoint row keeps, or None before its first one."""
    kept = (endpoint.annotations or {}).get("scaling") if endpoint is not None else None
    return ScalingExplanation.model_validate(kept) if kept else None
