"""Node activities for a workflow's long-running services (the per-model LiteLLM proxy now): build the
command on the node, own the process exactly like a rank, and probe its liveness."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.node_context import NodeContext
from activities.supervision import SERVICE_PIDFILE, Supervisor
from berth.api_client import ApiClient
from berth.child_environment import BASE_VARIABLES, PYTHON_SETTINGS, inherit
from berth.errors import BerthError
from berth.processes import berth_python, remove_file, tail
from gateway.litellm_service import LiteLLMLaunch, LiteLLMServiceSpec, prepare_launch
from workflows.payloads import LiveCheck, ServiceExit, ServiceRun

KINDS = ("litellm", "gateway", "opencode")


@dataclass(frozen=True)
class ServiceLaunch:
    """What to start: argv (no secret), environment (may hold secrets), working directory."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]
    working_directory: Path


class ServiceActivities:
    """Services bound to one node agent. Secrets are resolved here, at the last moment, through the
    API's internal routes: never through Temporal in clear, never on a command line or in a log."""

    def __init__(self, context: NodeContext, supervisor: Supervisor, api: ApiClient) -> None:
        self.context = context
        self.supervisor = supervisor
        self.api = api

    async def _master_key(self, run: ServiceRun) -> str:
        if run.api_key_secret:
            try:
                _kind, value = await self.api.resolve_secret(run.api_key_secret, run.owner)
            except BerthError as error:
                parameter = "MasterKeySecret" if run.kind == "gateway" else "ApiKeySecret"
                raise ApplicationError(f"{parameter} {run.api_key_secret}: {error}", type="SecretError",
                                       non_retryable=True) from None
            return value
        if not run.api_key:
            raise ApplicationError("the LiteLLM service has no master key", type="ServiceConfig",
                                   non_retryable=True)
        return run.api_key

    async def _litellm_launch(self, run: ServiceRun, workdir: Path) -> LiteLLMLaunch:
        token = await self.api.service_token(run.endpoint_id)
        base = self.api.base_url
        spec = LiteLLMServiceSpec(
            model_name=run.options["model_name"],
            served_model_name=run.options.get("served_model_name", ""),
            master_key=SecretStr(await self._master_key(run)),
            replicas_url=f"{base}/v1/internal/endpoints/{run.endpoint_id}/replicas",
            replicas_token=SecretStr(token),
            endpoint_id=run.endpoint_id,
            # Always the public JWKS route: with publication off it answers 404 and LiteLLM falls back
            # to its key check, which is the documents' behaviour.
            jwks_url=f"{base}/.well-known/jwks.json",
            # The pool's size follows the rate LiteLLM itself measures (issue: "at the LiteLLM proxy").
            rate_url=f"{base}/v1/internal/endpoints/{run.endpoint_id}/requests",
            host=run.address, port=run.port,
        )
        return await asyncio.to_thread(prepare_launch, spec, workdir)

    async def _gateway_launch(self, run: ServiceRun, workdir: Path) -> ServiceLaunch:
        """The discovering gateway polls the endpoints API as the workflow's owner."""
        token, _expires = await self.api.owner_token(run.owner)
        keys_token = await self.api.replica_keys_token(run.owner)  # the keys of the copies it discovers
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        # The owner's token and the API's address only: nothing of the agent's (its admin token, state dir).
        env = inherit(os.environ, (*BASE_VARIABLES, *PYTHON_SETTINGS))
        # The entry's MasterKeySecret (or the key generated at submission): environment only, never argv.
        # A workflow submitted before the gateway honoured its key has neither and keeps running without.
        master_key = await self._master_key(run) if run.api_key or run.api_key_secret else ""
        env.update({"BERTH_API_URL": self.api.base_url, "BERTH_TOKEN": token, "BERTH_TLS_CA": self.api.ca_file or "",
                    "BERTH_REPLICA_KEYS_TOKEN": keys_token, "BERTH_GATEWAY_MASTER_KEY": master_key,
                    "PYTHONUNBUFFERED": "1"})
        argv = (*berth_python("cli"), "gateway", "--host", run.address, "--port", str(run.port),
                "--endpoint-id", run.endpoint_id, *_gateway_options(run.options))
        return ServiceLaunch(argv=argv, environment=env, working_directory=workdir)

    async def _opencode_candidates(self, run: ServiceRun) -> list[tuple[str, str | None, str | None]]:
        """(URL, endpoint id on this cluster or None, its service): the pinned Endpoint, or else every
        gateway endpoint the owner may reach (seeds/001: "Left empty, the workflow registers every
        gateway endpoint its own identity can reach"). Model endpoints are reached by pinning one."""
        api_token, _ = await self.api.owner_token(run.owner)
        async with ApiClient(self.api.base_url, api_token) as as_owner:
            listed = await as_owner.endpoints()
        pinned = run.options.get("endpoint")
        if pinned:
            url = pinned.rstrip("/").removesuffix("/v1")
            endpoint_id = url.rsplit("/endpoints/", 1)[1] if "/endpoints/" in url else None
            service = next((item.service for item in listed if item.id == endpoint_id), None)
            return [(url, endpoint_id, service)]
        found: list[tuple[str, str | None, str | None]] = [
            (item.url, item.id, "gateway") for item in listed
            if item.service == "gateway" and item.ready and item.id != run.endpoint_id]
        if not found:
            raise ApplicationError(
                "OpenCode has no endpoint to use: with Endpoint empty it registers every gateway endpoint "
                "you may reach, and none is ready. Start the \"LiteLLM Model Gateway\" entry (its models "
                "run with Proxy=false), or pin one model endpoint with Endpoint=URL from `berth endpoint list`.",
                type="EndpointUnreachable", non_retryable=True)
        return found

    async def _opencode_launch(self, run: ServiceRun, workdir: Path) -> ServiceLaunch:
        """`opencode serve` reaching the pinned endpoint, or every gateway endpoint the owner may reach,
        with a token minted for the owner (≤ 7 days), plus the owner's LiteLLM key from ApiKeySecret in
        `x-litellm-api-key` when one is named; with EndpointAuth=api-key, the key instead of a token."""
        from berth import opencode

        options = run.options
        # seeds/001: ApiKeySecret alone = "keep the Fuzzball token [in apiKey] and add the key … in a
        # header" (to a LiteLLM endpoint); EndpointAuth=api-key (public endpoints) = the key in place of
        # the token.
        litellm_key = await self._master_key(run) if run.api_key_secret else None
        key_only = options.get("endpoint_auth") == "api-key"
        targets: dict[str, opencode.ProviderTarget] = {}
        expires = 0.0
        candidates = await self._opencode_candidates(run)
        problems = []
        key_used = False  # the key travels to OpenCode's environment only when a provider sends it
        tokens: dict[str, str] = {}  # env var → that endpoint's token (a token is bound to one endpoint)
        for url, endpoint_id, service in candidates:
            token = None
            if endpoint_id and not key_only:
                token, lapses = await self.api.owner_token(run.owner, endpoint_id)
                expires = min(expires, lapses) if expires else lapses
            # The key beside a token is for a LiteLLM proxy behind the endpoint proxy; nothing behind a
            # gateway or a Proxy=false pool checks one, and they would carry the owner's key to the copies.
            sent_key = litellm_key if not token or service == "litellm" else None
            try:
                models = await opencode.preflight(url, token, sent_key)
            except BerthError as error:
                problems.append(str(error))
                if options.get("endpoint"):
                    raise ApplicationError(f"Endpoint {url}: {error}", type="EndpointUnreachable",
                                           non_retryable=True) from None
                continue
            key = "berth" if not targets else f"berth-{len(targets) + 1}"
            token_env = opencode.TOKEN_ENV if not targets else f"{opencode.TOKEN_ENV}_{len(targets) + 1}"
            if token:
                tokens[token_env] = token
            api_key = "{env:LITELLM_KEY}" if sent_key and not token else "{env:" + token_env + "}"
            headers = {"x-litellm-api-key": "{env:LITELLM_KEY}"} if sent_key and token else {}
            key_used = key_used or bool(sent_key)
            targets[key] = opencode.ProviderTarget(url=url, model_ids=tuple(models),
                                                   max_context=int(options.get("max_context") or 32768),
                                                   api_key=api_key, headers=headers)
        if not targets:
            why = "; ".join(problems)
            raise ApplicationError(f"OpenCode has no model endpoint to use: {why}", type="EndpointUnreachable",
                                   non_retryable=True)
        if expires:
            await self.api.note_token_lapse(run.endpoint_id, expires)
        config = opencode.opencode_config(targets, default_model=options.get("model") or None, offline=True)
        assert run.password, "the OpenCode password is generated at submission"
        command = opencode.render_serve(config, run.password, host=run.address, port=run.port,
                                        data_dir=workdir / "opencode", litellm_key=litellm_key if key_used else None,
                                        workspace=self._workspace(run), more_tokens=tokens)
        self._show_server(run, command.url, [t.url for t in targets.values()], expires, litellm_key is not None)
        env = inherit(os.environ, ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE"))
        if self.api.ca_file:  # OpenCode (Bun) trusts the private CA of the https endpoint proxy only so
            env["NODE_EXTRA_CA_CERTS"] = self.api.ca_file
        env.update(command.env)
        return ServiceLaunch(argv=tuple(command.argv), environment=env, working_directory=command.cwd)

    def _show_server(self, run: ServiceRun, local_url: str, endpoints: list[str], expires: float,
                     api_key: bool) -> None:
        """The show-server job's log: where to attach, the password, the endpoints, when the token lapses."""
        from berth.opencode import SERVER_USERNAME

        show = self.context.state.workflow_logs(run.workflow_id) / "show-server" / "show-server.log"
        show.parent.mkdir(parents=True, exist_ok=True)
        url = run.endpoint_url or local_url
        show.write_text(
            f"OpenCode server: {url}\nuser: {SERVER_USERNAME}\n"
            f"password: {run.password}\nattach: opencode attach {url} -p {run.password}\n"
            f"model endpoints: {', '.join(endpoints)}\n"
            f"{_token_line(expires, api_key)}\n")

    def _workspace(self, run: ServiceRun) -> Path:
        """OpenCode's workspace (/data/workspace in a container): on the persistent `Volume` when one is
        named, else on the workflow's ephemeral volume, deleted when the workflow stops."""
        state = self.context.state
        volume = run.options.get("volume")
        root = state.persistent_volume(volume) if volume else state.ephemeral_volume(run.workflow_id)
        return root / "workspace"

    async def _launch(self, run: ServiceRun, workdir: Path) -> ServiceLaunch:
        if run.kind == "gateway":
            return await self._gateway_launch(run, workdir)
        if run.kind == "opencode":
            return await self._opencode_launch(run, workdir)
        launch = await self._litellm_launch(run, workdir)
        return ServiceLaunch(argv=launch.argv, environment=launch.environment,
                             working_directory=launch.working_directory)

    @activity.defn(name="run_service")
    async def run_service(self, run: ServiceRun) -> ServiceExit:
        """Own one service process from start to exit; heartbeat while it lives; SIGTERM then SIGKILL
        its process group on cancellation. Returns how it ended."""
        if run.kind not in KINDS:
            raise ApplicationError(f"unknown service kind '{run.kind}'", type="ServiceConfig",
                                   non_retryable=True)
        context = self.context
        workdir = self._workdir(run)
        log_path = self._log_path(run)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        launch = await self._launch(run, workdir)
        # A local file opened once per service start: not worth a thread hop.
        with open(log_path, "ab", buffering=0) as log:  # noqa: ASYNC230
            # The command line holds no secret (the key lives only in the process environment).
            argv = " ".join(launch.argv)
            log.write(f"[berth] node {context.node_id} starting {run.name}: {argv}\n".encode())
            try:
                process = await asyncio.create_subprocess_exec(
                    *launch.argv, cwd=launch.working_directory, env=dict(launch.environment),
                    stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"node {context.node_id} could not start {run.name} ({launch.argv[0]}): {error}"
                log.write(f"[berth] {message}\n".encode())
                raise ApplicationError(message, type="ServiceSpawnFailed", non_retryable=True) from None
        pidfile = workdir / SERVICE_PIDFILE
        await self.supervisor.record(pidfile, process.pid, name=run.name, workflow_id=run.workflow_id,
                                     log=str(log_path))
        try:
            code = await self.supervisor.watch(process, run.name)
        finally:
            remove_file(pidfile)
        assert code is not None
        return ServiceExit(name=run.name, node_id=context.node_id,
                           exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                           log_tail=tail(log_path, 15))

    @activity.defn(name="adopt_service")
    async def adopt_service(self, run: ServiceRun) -> ServiceExit:
        """Take back a service whose previous agent died (see Supervisor.adopt): it keeps its pid and port."""
        adopted = await self.supervisor.adopt(self._workdir(run) / SERVICE_PIDFILE, run.name, self._log_path(run))
        return ServiceExit(name=run.name, node_id=self.context.node_id, reason="lost" if adopted.lost else "exited",
                           note=adopted.note, log_tail=adopted.log_tail)

    def _workdir(self, run: ServiceRun) -> Path:
        return self.context.node_dir / "services" / f"{run.workflow_id}.{run.name}"

    def _log_path(self, run: ServiceRun) -> Path:
        return self.context.state.workflow_logs(run.workflow_id) / run.name / f"{run.name}.log"

    @activity.defn(name="wait_live")
    async def wait_live(self, check: LiveCheck) -> float:
        """Poll `url + path` until it answers 200; return the seconds waited."""
        started = time.monotonic()
        last = "no answer yet"
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), trust_env=False) as client:
            while time.monotonic() - started < check.timeout_s:
                activity.heartbeat(last)
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(check.url + check.path)
                    if response.status_code == 200 or (check.unauthorized_is_live and response.status_code == 401):
                        return time.monotonic() - started
                    last = f"{check.path} answered {response.status_code}"
                await asyncio.sleep(0.2)
        raise ApplicationError(f"{check.url} was not live within {check.timeout_s:.0f} s ({last})",
                               type="NotReady", non_retryable=True)



def _gateway_options(options: Mapping[str, str]) -> tuple[str, ...]:
    """The entry's RoutingPolicy and DiscoveryInterval as `berth gateway` options (no secret in them)."""
    argv: tuple[str, ...] = ()
    if options.get("routing_policy"):
        argv += ("--routing-policy", options["routing_policy"])
    if options.get("discovery_interval_s"):
        argv += ("--discovery-interval", options["discovery_interval_s"])
    return argv


def _token_line(expires: float, api_key: bool) -> str:
    """The show-server line on how OpenCode authenticates to its models: a minted Berth token lapses
    (and a restart mints a new one); a LiteLLM key from ApiKeySecret does not."""
    if expires:
        return (f"Berth token for the models lapses: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires))}"
                " (restart the workflow to renew it)")
    if api_key:
        return "models reached with the LiteLLM key from ApiKeySecret: no Berth token, nothing lapses"
    return "models reached without a Berth token: nothing lapses"
