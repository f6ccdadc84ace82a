"""What the control plane knows for OpenCode: an endpoint's client facts; the entry's submission checks."""

from __future__ import annotations

import re
from typing import Any

from berth.contracts import PoolFacts, ServedModel
from berth.errors import NotFoundError, UserInputError
from berth.kinds import ProcessKind
from berth.opencode import check_context, pick_default_model
from catalog.definition import WorkflowDefinition
from catalog.entry import load_catalog
from server.access import in_scope
from server.store.database import Store
from server.store.tables import EndpointRow
from server.views import discoverable

TOOL_FLAG = "--enable-auto-tool-choice"
ENDPOINT_PATH = re.compile(r"/endpoints/(?P<id>[A-Za-z0-9_-]+)/?(?:v1/?)?$")


def client_facts(store: Store, endpoint: EndpointRow, url: str) -> dict[str, Any]:
    """The facts a client config needs: URL, the models the endpoint serves with their contexts and tool
    calling, and, for a reader of one model, the model endpoint's model (a gateway's: its default)."""
    if endpoint.service == ProcessKind.GATEWAY.value:
        models = gateway_models(store, endpoint)
        if not models:
            raise UserInputError(f"Endpoint {endpoint.id} is a gateway that discovers no model yet: start a "
                                 "model with Proxy=false in its owner's reach, then retry.")
        first = {model.model_id: model for model in models}[
            pick_default_model([(model.model_id, model.max_context) for model in models])]
        proxy = False
    else:
        definition = _definition(store, endpoint)
        if definition.replica is None or not definition.model_id:
            raise UserInputError(f"Endpoint {endpoint.id} serves no model ({definition.entry}); "
                                 "`berth endpoint opencode-config` needs a model or gateway endpoint.")
        first = _served_model(endpoint, definition)
        models, proxy = [first], definition.proxy
    return {
        "endpoint_id": endpoint.id, "workflow_id": endpoint.workflow_id, "url": url, "scope": endpoint.scope,
        "model_id": first.model_id, "max_context": first.max_context, "tool_calling": first.tool_calling,
        "proxy": proxy, "models": [model.model_dump() for model in models],
    }


def gateway_models(store: Store, gateway: EndpointRow) -> list[ServedModel]:
    """What a discovering gateway serves: the models of the Proxy=false pools its owner may reach, as its
    discovery lists them with the owner's token (gateway/models/model_gateway.py), by model id. A model several
    pools serve gets the smallest context (a request may reach any of them)."""
    owner = store.identity(gateway.owner)
    found: dict[str, list[ServedModel]] = {}
    for endpoint in store.endpoints():
        if not endpoint.model_id or not discoverable(endpoint) or not (owner.admin or in_scope(endpoint, owner)):
            continue
        try:
            definition = _definition(store, endpoint)
        except NotFoundError:  # its workflow went between the two reads: the gateway drops it too
            continue
        found.setdefault(endpoint.model_id, []).append(_served_model(endpoint, definition))
    return [ServedModel(model_id=model_id, max_context=min(pool.max_context for pool in pools),
                        tool_calling=all(pool.tool_calling for pool in pools))
            for model_id, pools in sorted(found.items())]


def _definition(store: Store, endpoint: EndpointRow) -> WorkflowDefinition:
    return WorkflowDefinition.model_validate(store.workflow_definition(store.workflow(endpoint.workflow_id)))


def _served_model(endpoint: EndpointRow, definition: WorkflowDefinition) -> ServedModel:
    """A pool's model: its vLLM `--served-model-name` (what /v1/models lists), the MaxContextSize of the
    revision it serves (the endpoint's pool facts, which a rollout replaces; the definition's before one),
    and whether its engine calls tools."""
    assert definition.replica is not None
    engine = definition.replica.engine
    served_context = PoolFacts.from_annotations(endpoint.annotations).max_context
    return ServedModel(model_id=engine.served_model_name,
                       max_context=served_context if served_context is not None else engine.max_model_len,
                       tool_calling=TOOL_FLAG in (*engine.args, *engine.extra_args))


def check_submission(store: Store, definition: WorkflowDefinition, proxy_url: str) -> None:
    """Refuse at submission an OpenCode MaxContextSize above the model's, where the model is known: an
    `Endpoint` on this cluster (its workflow's own MaxContextSize), or a `Model` a catalog entry describes."""
    service = definition.service
    if service is None or service.kind is not ProcessKind.OPENCODE:
        return
    options = service.options
    requested = int(options.get("max_context") or 0)
    endpoint_url = options.get("endpoint")
    if endpoint_url:
        endpoint_id = _cluster_endpoint_id(str(endpoint_url), proxy_url)
        if endpoint_id is not None:
            try:
                endpoint = store.endpoint(endpoint_id)
            except NotFoundError:
                raise UserInputError(f"Endpoint={endpoint_url}: this cluster has no endpoint {endpoint_id} "
                                     "(stopped, or mistyped). `berth endpoint list` shows yours.") from None
            model = options.get("model")
            _check_endpoint(client_facts(store, endpoint, str(endpoint_url)), str(model) if model else None,
                            None if endpoint.service == ProcessKind.GATEWAY.value else requested)
            return
    model = options.get("model")
    if model:
        for entry in load_catalog().values():
            if entry.model is not None and entry.model.repo == model:
                check_context(requested, entry.model.max_context, f"{model} (catalog entry {entry.name})")
                return


def _check_endpoint(facts: dict[str, Any], model: str | None, requested: int | None) -> None:
    """A pinned endpoint of this cluster: `Model` must be one it serves, and a model endpoint's
    MaxContextSize fit its model. A gateway's is not checked: its models take their pools' own contexts."""
    served = {item["model_id"]: item["max_context"] for item in facts["models"]}
    where = f"endpoint {facts['endpoint_id']}"
    if model and model not in served:
        raise UserInputError(f"Model={model}: {where} serves {', '.join(served)} only; use exactly an id its "
                             "/v1/models lists.")
    if requested is not None:
        chosen = model or facts["model_id"]
        check_context(requested, served[chosen], f"{where} ({chosen})")


def _cluster_endpoint_id(url: str, proxy_url: str) -> str | None:
    """`<proxy>/endpoints/<id>[/v1]` → id; any other URL is an API outside Berth."""
    base = proxy_url.rstrip("/")
    if not url.startswith(base + "/"):
        return None
    match = ENDPOINT_PATH.search(url[len(base):])
    return match.group("id") if match else None
