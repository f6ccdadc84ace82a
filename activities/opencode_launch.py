"""OpenCode's launch: `opencode serve` with a provider per model endpoint it reaches, each with its own
token (a token is bound to one endpoint), and the show-server job's log."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.front_launch import FrontJail, FrontLaunch
from activities.node_context import NodeContext
from berth import opencode
from berth.api_client import ApiClient
from berth.child_environment import inherit
from berth.errors import BerthError
from berth.kinds import ProcessKind, facts
from workflows.payloads import FrontRun


async def _candidates(api: ApiClient, run: FrontRun) -> list[tuple[str, str | None, str | None]]:
    """(URL, endpoint id on this cluster or None, its service): the pinned Endpoint, or else every
    gateway endpoint the owner may reach (seeds/001: "Left empty, the workflow registers every
    gateway endpoint its own identity can reach"). Model endpoints are reached by pinning one."""
    api_token, _ = await api.owner_token(run.owner)
    async with ApiClient(api.base_url, api_token) as as_owner:
        listed = await as_owner.endpoints()
    pinned = run.options.get("endpoint")
    if pinned:
        url = pinned.rstrip("/").removesuffix("/v1")
        endpoint_id = url.rsplit("/endpoints/", 1)[1] if "/endpoints/" in url else None
        service = next((item.service for item in listed if item.id == endpoint_id), None)
        return [(url, endpoint_id, service)]
    found: list[tuple[str, str | None, str | None]] = [
        (item.url, item.id, ProcessKind.GATEWAY.value) for item in listed
        if item.service == ProcessKind.GATEWAY and item.ready and item.id != run.endpoint_id]
    if not found:
        raise ApplicationError(
            "OpenCode has no endpoint to use: with Endpoint empty it registers every gateway endpoint "
            "you may reach, and none is ready. Start the \"LiteLLM Model Gateway\" entry (its models "
            "run with Proxy=false), or pin one model endpoint with Endpoint=URL from `berth endpoint list`.",
            type="EndpointUnreachable", non_retryable=True)
    return found


@dataclass
class _Providers:
    """OpenCode's providers, one per endpoint it reaches, and what they need in its environment."""

    targets: dict[str, opencode.ProviderTarget] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # env var → that endpoint's token
    expires: float = 0.0  # when the first token lapses (0: none was minted)
    key_used: bool = False  # the key travels to OpenCode's environment only when a provider sends it


async def opencode_launch(api: ApiClient, node: NodeContext, run: FrontRun, workdir: Path,
                          litellm_key: str | None) -> FrontLaunch:
    """`opencode serve` reaching the pinned endpoint, or every gateway endpoint the owner may reach,
    with a token minted for the owner (≤ 7 days), plus the owner's LiteLLM key from ApiKeySecret in
    `x-litellm-api-key` when one is named; with EndpointAuth=api-key, the key instead of a token."""
    providers = await _providers(api, run, await _candidates(api, run), litellm_key)
    if providers.expires:
        await api.note_token_lapse(run.endpoint_id, providers.expires)
    targets = providers.targets
    config = opencode.opencode_config(targets, default_model=run.options.get("model") or None, offline=True)
    assert run.password, "the OpenCode password is generated at submission"
    command = opencode.render_serve(config, run.password, host=run.address, port=run.port,
                                    data_dir=workdir / "opencode",
                                    litellm_key=litellm_key if providers.key_used else None,
                                    workspace=_workspace(node, run), more_tokens=providers.tokens)
    _show_server(node, run, command.url, [t.url for t in targets.values()], providers.expires,
                 litellm_key is not None)
    env = inherit(os.environ, ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE"))
    if api.ca_file:  # OpenCode (Bun) trusts the private CA of the https endpoint proxy only so
        env["NODE_EXTRA_CA_CERTS"] = api.ca_file
    env.update(command.env)
    return FrontLaunch(argv=tuple(command.argv), environment=env, working_directory=command.cwd,
                       jail=_jail(command, env))


def _jail(command: opencode.ServeCommand, env: Mapping[str, str]) -> FrontJail:
    """What `opencode serve` needs jailed (activities/front_jail.py): its home and workspace, its opencode.json
    and the CA files its environment names, read-only; its config dir kept the agent's (render_serve says why)."""
    certificates = (Path(env[name]) for name in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE") if env.get(name))
    return FrontJail(read_only=(command.config_path, *certificates), writable=(command.home, command.cwd),
                     kept=(command.config_dir,))


async def _providers(api: ApiClient, run: FrontRun, candidates: list[tuple[str, str | None, str | None]],
                     litellm_key: str | None) -> _Providers:
    """A provider for every candidate that answers its preflight (a pinned Endpoint must)."""
    options = run.options
    # seeds/001: ApiKeySecret alone = "keep the Fuzzball token [in apiKey] and add the key … in a
    # header" (to a LiteLLM endpoint); EndpointAuth=api-key (public endpoints) = the key in place of
    # the token.
    key_only = options.get("endpoint_auth") == "api-key"
    found = _Providers()
    problems = []
    for url, endpoint_id, service in candidates:
        token = None
        if endpoint_id and not key_only:
            token, lapses = await api.owner_token(run.owner, endpoint_id)
            found.expires = min(found.expires, lapses) if found.expires else lapses
        # The key beside a token is for a LiteLLM proxy behind the endpoint proxy; nothing behind a
        # gateway or a Proxy=false pool checks one, and they would carry the owner's key to the copies.
        sent_key = litellm_key if not token or facts(service).fronts_pool else None
        number = len(found.targets) + 1
        token_env = opencode.TOKEN_ENV if number == 1 else f"{opencode.TOKEN_ENV}_{number}"
        api_key = "{env:LITELLM_KEY}" if sent_key and not token else "{env:" + token_env + "}"
        headers = {"x-litellm-api-key": "{env:LITELLM_KEY}"} if sent_key and token else {}
        try:
            models = await opencode.preflight(url, token, sent_key)
            target = await _target(api, run, url, endpoint_id, service, models, api_key=api_key, headers=headers)
        except BerthError as error:
            problems.append(str(error))
            if options.get("endpoint"):
                raise ApplicationError(f"Endpoint {url}: {error}", type="EndpointUnreachable",
                                       non_retryable=True) from None
            continue
        if token:
            found.tokens[token_env] = token
        found.key_used = found.key_used or bool(sent_key)
        found.targets["berth" if number == 1 else f"berth-{number}"] = target
    if not found.targets:
        raise ApplicationError(f"OpenCode has no model endpoint to use: {'; '.join(problems)}",
                               type="EndpointUnreachable", non_retryable=True)
    return found


async def _target(api: ApiClient, run: FrontRun, url: str, endpoint_id: str | None, service: str | None,
                  models: tuple[str, ...], **more: Any) -> opencode.ProviderTarget:
    """A pinned model endpoint's models get MaxContextSize (submission held it to the model's); a gateway's,
    each its own pool's context (issue 31: one MaxContextSize for all made SmolLM2's 8,192-token pool the
    default with room for 32,768, and OpenCode's first prompt failed)."""
    fallback = int(run.options.get("max_context") or 32768)
    if service != ProcessKind.GATEWAY.value or endpoint_id is None:
        return opencode.ProviderTarget(url=url, model_ids=models, max_context=fallback, **more)
    served = (await api.endpoint_client_config(endpoint_id)).models
    return opencode.served_target(url, models, served, fallback_context=fallback, **more)


# Bun's TLS errors reach an OpenCode client as `Session not found` and nothing else (issue 31).
CA_HINT = ("https: if the cluster uses a private CA, OpenCode must trust it or it answers only \"Session not "
           "found\": `berth ca-cert > cluster-ca.pem; export NODE_EXTRA_CA_CERTS=$PWD/cluster-ca.pem`")


def _show_server(node: NodeContext, run: FrontRun, local_url: str, endpoints: list[str], expires: float,
                 api_key: bool) -> None:
    """The show-server job's log: where to attach, the password, the endpoints, when the token lapses."""
    show = node.state.workflow_logs(run.workflow_id) / "show-server" / "show-server.log"
    show.parent.mkdir(parents=True, exist_ok=True)
    url = run.endpoint_url or local_url
    show.write_text(
        f"OpenCode server: {url}\nuser: {opencode.SERVER_USERNAME}\n"
        f"password: {run.password}\nattach: opencode attach {url} -p {run.password}\n"
        f"model endpoints: {', '.join(endpoints)}\n"
        f"{_token_line(expires, api_key)}\n"
        + (f"{CA_HINT}\n" if url.startswith("https://") else ""))


def _workspace(node: NodeContext, run: FrontRun) -> Path:
    """OpenCode's workspace (/data/workspace in a container): on the persistent `Volume` when one is
    named, else on the workflow's ephemeral volume, deleted when the workflow stops."""
    state = node.state
    volume = run.options.get("volume")
    root = state.persistent_volume(volume) if volume else state.ephemeral_volume(run.workflow_id)
    return root / "workspace"


def _token_line(expires: float, api_key: bool) -> str:
    """The show-server line on how OpenCode authenticates to its models: a minted Berth token lapses
    (and a restart mints a new one); a LiteLLM key from ApiKeySecret does not."""
    if expires:
        return (f"Berth token for the models lapses: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires))}"
                " (restart the workflow to renew it)")
    if api_key:
        return "models reached with the LiteLLM key from ApiKeySecret: no Berth token, nothing lapses"
    return "models reached without a Berth token: nothing lapses"
