"""Issue 29, finding 9: a secret reference must be at least as widely scoped as what uses it. An
organization's (or group's) model may not carry its registrant's *user* HF token — any member could start its
download and spend that token. Refused in one line at registration, and at the job for a model registered
before the rule (its row is kept: nothing lost). Through the real API and store, in process."""

from __future__ import annotations

from server.context import ServerContext
from server.store.tables import ModelRow
from tests.server.test_models_registry import SMOL, Apis, apis, context, staged  # noqa: F401 — fixtures


async def test_a_shared_model_may_not_carry_a_narrower_secret(apis: Apis) -> None:  # noqa: F811
    alice = apis.as_("alice")
    for scope, secret in (("organization", "secret://user/hf"), ("organization", "secret://group/hf"),
                          ("group", "secret://user/hf")):
        refused = await alice.post("/v1/models", json={"name": f"m-{scope}", "source": SMOL, "scope": scope,
                                                       "hf_token_secret": secret})
        detail = refused.json()["detail"]
        assert refused.status_code == 400 and "narrower than the model" in detail and "\n" not in detail, detail
        assert f"secret://{scope}/NAME" in detail
    for number, (scope, secret) in enumerate((("organization", "secret://organization/hf"),
                                              ("group", "secret://group/hf"), ("group", "secret://organization/hf"),
                                              ("user", "secret://user/hf"))):
        made = await alice.post("/v1/models", json={"name": f"ok-{number}", "source": SMOL,
                                                    "scope": scope, "hf_token_secret": secret})
        assert made.status_code == 201, made.text


async def test_a_model_registered_before_the_rule_is_refused_at_its_job(apis: Apis,  # noqa: F811
                                                                        context: ServerContext) -> None:  # noqa: F811
    alice, bob = apis.as_("alice"), apis.as_("bob")
    made = await alice.post("/v1/models", json={"name": "old", "source": SMOL, "scope": "organization"})
    assert made.status_code == 201
    with context.store.session() as s:  # as an earlier release stored it
        s.get(ModelRow, made.json()["id"]).hf_token_secret = "secret://user/hf"  # type: ignore[union-attr]
    refused = await bob.post("/v1/models/old/materialize")
    assert refused.status_code == 400 and "narrower than the model" in refused.json()["detail"]
    assert context.model_jobs.started == []  # type: ignore[union-attr]
    assert (await bob.get("/v1/models/old")).status_code == 200  # the row stays
