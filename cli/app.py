"""The `berth` command line: the root Typer app, which registers each resource's commands (one module each).
cli/main.py runs it for every command line that no fast path (cli/fast/) answers."""

from __future__ import annotations

import sys

import typer

from cli import (
    admin,
    apply,
    audit,
    capacity,
    catalog,
    components,
    endpoint,
    events,
    explain,
    identity,
    key,
    model,
    node,
    policy,
    secret,
    stack,
    tokens,
    top,
    usage,
    web_console,
    workflow,
)

app = typer.Typer(help="Berth: serve LLMs on GPU clusters from a catalog.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
# Help lists the root's commands in this order (those added without a name), then its groups.
app.add_typer(stack.app)  # up, ca-cert, down, status
app.add_typer(components.app)  # server, worker, proxy, gateway, admin-token, hf-mirror
app.add_typer(identity.app)  # login
app.add_typer(apply.app)  # apply, diff
app.add_typer(web_console.app)  # console
app.add_typer(top.app)  # top
app.add_typer(capacity.app)  # capacity
app.add_typer(events.app)  # events
app.add_typer(workflow.app, name="workflow")
app.add_typer(catalog.app, name="catalog", help="Alias of `berth workflow catalog`.")
app.add_typer(endpoint.app, name="endpoint")
app.add_typer(explain.app, name="explain")
app.add_typer(node.app, name="node")
app.add_typer(secret.app, name="secret")
app.add_typer(identity.user_app, name="user")
app.add_typer(identity.group_app, name="group")
app.add_typer(tokens.app, name="token")
app.add_typer(audit.app, name="audit")
app.add_typer(key.app, name="key")
app.add_typer(model.app, name="model")
app.add_typer(admin.app, name="admin")
app.add_typer(policy.app, name="policy")
app.add_typer(usage.app, name="usage")


def run() -> None:
    # httpx's package imports its own command line (click, rich's progress bars, pygments) unless that import
    # fails. Berth never runs it, and it is 20-60 ms of CPU of every API command's start (issue 33,
    # docs/performance.md): a None in sys.modules makes that one import fail, as Python documents.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    app()
