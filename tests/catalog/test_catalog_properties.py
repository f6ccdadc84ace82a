"""Property: any in-bounds values drawn from an entry's own parameter list render to a valid definition."""

from __future__ import annotations

import shlex
import string
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from catalog.definition import SitePick, WorkflowDefinition
from catalog.entry import Entry, Parameter, ParameterType, load_catalog
from catalog.extra_args import engine_args_refusal
from catalog.extra_env import ALLOWED
from catalog.render import render, resolve_values

SAFE = string.ascii_letters + string.digits + "._-"
NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
# In bounds = a name ExtraEnv's allow-list names (catalog/extra_env.py).
ENV_NAME = st.sampled_from(sorted(ALLOWED))
# In bounds = flags ExtraArgs allows (catalog/extra_args.py): switches, numbers, choices, paths inside the model.
FLAG_WORDS = st.one_of(
    st.sampled_from(["--enforce-eager", "--no-enable-prefix-caching", "--enable-auto-tool-choice",
                     "--disable-log-stats"]).map(lambda flag: [flag]),
    st.builds(lambda number: ["--max-num-seqs", str(number)], st.integers(1, 1024)),
    st.builds(lambda dtype: [f"--dtype={dtype}"], st.sampled_from(["auto", "half", "bfloat16"])),
    st.builds(lambda path: ["--chat-template", path],
              st.from_regex(r"[a-z0-9_]{1,8}(/[a-z0-9_]{1,8})?\.jinja", fullmatch=True)),
)


def secret(parameter: Parameter) -> st.SearchStrategy[str]:
    scopes = ["user"] if parameter.user_only else ["user", "group", "organization"]
    return st.builds(lambda scope, name: f"secret://{scope}/{name}", st.sampled_from(scopes), NAME)


def hf_model(entry: Entry) -> st.SearchStrategy[str]:
    # A revision is a git ref (issue 11 item 10): no `..`, no leading `.` or `-`.
    ref = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_-]|\.[A-Za-z0-9]){0,11}", fullmatch=True)
    revision = st.one_of(st.just(""), ref.map(lambda r: f"@{r}"))
    if entry.model is not None:  # a per-model entry serves only its own repository
        return revision.map(lambda r: f"hf://{entry.model.repo}{r}")  # type: ignore[union-attr]
    return st.builds(lambda org, name, rev: f"hf://{org}/{name}{rev}", NAME, NAME, revision)


def strategy(entry: Entry, parameter: Parameter) -> st.SearchStrategy[Any]:
    kind = parameter.type
    if kind is ParameterType.INT:
        return st.integers(
            int(parameter.min or 0), int(parameter.max if parameter.max is not None else 1 << 20)
        )
    if kind is ParameterType.FLOAT:
        return st.floats(
            parameter.min or 0.0,
            parameter.max if parameter.max is not None else 1e6,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind is ParameterType.BOOL:
        return st.booleans()
    if kind is ParameterType.CHOICE:
        return st.sampled_from(parameter.choices)
    if kind is ParameterType.SECRET:
        return secret(parameter)
    if kind is ParameterType.HF_MODEL:
        return hf_model(entry)
    if kind is ParameterType.ARGS:
        # Everything else is refused on purpose: tests/catalog/test_berth_flags.py, tests/security/test_engine_flags*.
        joined = st.lists(FLAG_WORDS, max_size=4).map(lambda groups: [word for group in groups for word in group])
        return joined.filter(lambda words: engine_args_refusal(words) is None).map(shlex.join)
    if kind is ParameterType.ENV:
        pairs = st.dictionaries(ENV_NAME, st.text(SAFE + " ,=:/", max_size=12), max_size=4)
        return pairs.map(lambda env: " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()))
    if parameter.pattern is not None:
        return st.from_regex(parameter.pattern, fullmatch=True)
    return st.text(SAFE, max_size=20)


def sites_contradict(raw: dict[str, Any]) -> bool:
    """PreferredSite or FailoverSites outside AllowedSites or Residency, FailoverSites without PreferredSite or
    naming it: SitePick's documented refusals."""
    try:
        SitePick(preferred=raw.get("PreferredSite", ""), allowed=raw.get("AllowedSites", ""),
                 residency=raw.get("Residency", ""), failover=raw.get("FailoverSites", ""))
    except ValidationError:
        return True
    return False


@st.composite
def values_for(draw: st.DrawFn, entry: Entry) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for parameter in entry.parameters:
        # Required parameters always; the others half the time, so defaults are exercised too.
        if parameter.required or draw(st.booleans()):
            value = draw(strategy(entry, parameter))
            # Half as typed values (a --values-file), half as the strings --values sends.
            raw[parameter.name] = (
                value
                if draw(st.booleans())
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
            )
    return raw


@pytest.mark.parametrize("name", sorted(load_catalog()))
def test_any_in_bounds_values_render_a_valid_definition(name: str) -> None:
    entry = load_catalog()[name]

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values_for(entry))
    def check(raw: dict[str, Any]) -> None:
        # The documented cross-parameter refusals: api-key auth without the key to send, and a pool whose
        # MaxReplicas and MinReplicas, both given, contradict each other.
        assume(not (raw.get("EndpointAuth") == "api-key" and not raw.get("ApiKeySecret")))
        assume(not ("MinReplicas" in raw and "MaxReplicas" in raw
                    and int(raw["MaxReplicas"]) < int(raw["MinReplicas"])))
        # And site values placement or routing could never honour (catalog/definition.py SitePick).
        assume(not sites_contradict(raw))
        values = resolve_values(entry, raw)
        definition = render(entry, values)
        assert isinstance(definition, WorkflowDefinition)
        again = WorkflowDefinition.model_validate(
            yaml.safe_load(yaml.safe_dump(definition.model_dump(mode="json")))
        )
        assert again == definition  # the definition round-trips through YAML (golden files, the store)
        if definition.replica is not None:
            assert definition.replica.engine.max_model_len == values["MaxContextSize"]
            assert definition.replica.gpus_per_node == values["GpusPerNode"]
            assert definition.replica.nodes == values["Nodes"]
            assert definition.pool.max_replicas >= definition.pool.min_replicas
            assert definition.service is None
        else:
            assert definition.service is not None and definition.service.scope is definition.endpoint.scope

    check()
