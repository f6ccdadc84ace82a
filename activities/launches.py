"""What each front kind starts (berth/kinds.py holds their facts): argv, environment and working
directory, built on the node at the last moment. Secrets are resolved here through the API's internal
routes: never through Temporal in clear, never on a command line or in a log."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from activities.front_launch import FrontJail, FrontLaunch
from activities.litellm_service import LiteLLMLaunch, LiteLLMServiceSpec, prepare_launch
from activities.node_context import NodeContext
from activities.opencode_launch import opencode_launch
from activities.rank_jail import engine_paths
from berth.api_client import ApiClient
from berth.child_environment import BASE_VARIABLES, PYTHON_SETTINGS, inherit
from berth.errors import BerthError
from berth.kinds import ProcessKind, facts
from berth.processes import berth_python
from berth.settings import repo_root
from workflows.payloads import FrontRun

Launch = Callable[[ApiClient, NodeContext, FrontRun, Path], Awaitable[FrontLaunch]]


async def master_key(api: ApiClient, run: FrontRun) -> str:
    """The front's key: its secret (MasterKeySecret or ApiKeySecret, resolved now, as its owner), or the
    literal or generated key its run carries."""
    if run.api_key_secret:
        try:
            _kind, value = await api.resolve_secret(run.api_key_secret, run.owner)
        except BerthError as error:
            parameter = facts(run.kind).key_parameter
            raise ApplicationError(f"{parameter} {run.api_key_secret}: {error}", type="SecretError",
                                   non_retryable=True) from None
        return value
    if not run.api_key:
        raise ApplicationError("the LiteLLM service has no master key", type="ServiceConfig",
                               non_retryable=True)
    return run.api_key


async def litellm_launch(api: ApiClient, node: NodeContext, run: FrontRun, workdir: Path) -> FrontLaunch:
    """A pool's LiteLLM proxy: its config and sync hook, reaching the API as the endpoint's service."""
    token = await api.service_token(run.endpoint_id)
    base = api.base_url
    spec = LiteLLMServiceSpec(
        model_name=run.options["model_name"],
        served_model_name=run.options.get("served_model_name", ""),
        master_key=SecretStr(await master_key(api, run)),
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
    return await asyncio.to_thread(lambda: litellm_front(prepare_launch(spec, workdir)))


def litellm_front(launch: LiteLLMLaunch) -> FrontLaunch:
    """A LiteLLM launch as a front: jailed where the agent can (activities/fronts.py), as the rank user of its
    workflow — it parses what strangers send, so it runs with no more than ranks have (see `front_jail`). Beside
    what every jailed front reads, it reads its config, which holds no secret: the master key is in its environment.
    Blocking file work: call it in a thread."""
    environment = dict(launch.environment)
    jail = front_jail(launch.argv, environment, launch.working_directory, shared=(launch.config_path,))
    return FrontLaunch(argv=launch.argv, environment=environment, working_directory=launch.working_directory,
                       jail=jail)


def front_jail(argv: tuple[str, ...], environment: dict[str, str], run_dir: Path,
               shared: tuple[Path, ...] = ()) -> FrontJail:
    """What a front of Berth's (LiteLLM, the model gateway) needs jailed: it reads its virtualenv, the Python under it,
    the code it imports (PYTHONPATH, and Berth's own checkout or install) and the control plane's CA, and the
    agent's files in `shared`; it writes only its home, `run_dir`/home, which `environment` is given as HOME. The
    run dir stays the agent's: the agent writes the config and the pidfile there as root, and a directory the rank
    user owned would let it plant a link such a write would follow."""
    home = run_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    environment["HOME"] = str(home)
    certificate = environment.get("BERTH_TLS_CA")
    read_only = (*sorted(engine_paths(argv, environment) | {repo_root()}),
                 *((Path(certificate),) if certificate else ()), *shared)
    return FrontJail(read_only=read_only, writable=(home,), shared=shared)


async def gateway_launch(api: ApiClient, node: NodeContext, run: FrontRun, workdir: Path) -> FrontLaunch:
    """The discovering gateway polls the endpoints API as the workflow's owner."""
    token, _expires = await api.owner_token(run.owner)
    keys_token = await api.replica_keys_token(run.owner)  # the keys of the copies it discovers
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    # The owner's token and the API's address only: nothing of the agent's (its admin token, state dir).
    env = inherit(os.environ, (*BASE_VARIABLES, *PYTHON_SETTINGS))
    # The entry's MasterKeySecret (or the key generated at submission): environment only, never argv.
    # A workflow submitted before the gateway honoured its key has neither and keeps running without.
    key = await master_key(api, run) if run.api_key or run.api_key_secret else ""
    env.update({"BERTH_API_URL": api.base_url, "BERTH_TOKEN": token, "BERTH_TLS_CA": api.ca_file or "",
                "BERTH_REPLICA_KEYS_TOKEN": keys_token, "BERTH_GATEWAY_MASTER_KEY": key,
                "PYTHONUNBUFFERED": "1"})
    argv = (*berth_python("cli"), "gateway", "--host", run.address, "--port", str(run.port),
            "--endpoint-id", run.endpoint_id, *_gateway_options(run.options))
    # Jailed where the agent can, as LiteLLM is: it too answers what strangers send through its endpoint.
    jail = await asyncio.to_thread(front_jail, argv, env, workdir)
    return FrontLaunch(argv=argv, environment=env, working_directory=workdir, jail=jail)


async def _opencode(api: ApiClient, node: NodeContext, run: FrontRun, workdir: Path) -> FrontLaunch:
    # ApiKeySecret is the owner's LiteLLM key, sent beside (or instead of) a token.
    litellm_key = await master_key(api, run) if run.api_key_secret else None
    return await opencode_launch(api, node, run, workdir, litellm_key)


# Each front kind's launch; tests/architecture/test_kinds.py holds this table to the registry.
LAUNCHES: dict[ProcessKind, Launch] = {
    ProcessKind.LITELLM: litellm_launch,
    ProcessKind.GATEWAY: gateway_launch,
    ProcessKind.OPENCODE: _opencode,
}


def _gateway_options(options: Mapping[str, str]) -> tuple[str, ...]:
    """The entry's RoutingPolicy and DiscoveryInterval as `berth gateway` options (no secret in them)."""
    argv: tuple[str, ...] = ()
    if options.get("routing_policy"):
        argv += ("--routing-policy", options["routing_policy"])
    if options.get("discovery_interval_s"):
        argv += ("--discovery-interval", options["discovery_interval_s"])
    return argv
