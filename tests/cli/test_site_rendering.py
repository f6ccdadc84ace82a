"""Sites in the CLI (issue 36): `berth node list` shows each node's site and failure domain in their own columns and
leaves the two labels they come from out of its LABELS column (a node that reports none shows "-"); `berth explain
placement` names the site outcomes and shows the site score terms where they apply."""

from __future__ import annotations

from typing import get_args

import pytest

from berth.contracts import NodeView
from berth.contracts.explain import NodeOutcome, ScoreTerms
from cli.explain import OUTCOMES, score_line
from cli.node import _node_rows

pytestmark = pytest.mark.timeout(30)


def node(node_id: str, labels: dict[str, str], **where: str) -> NodeView:
    return NodeView(id=node_id, state="ready", address="10.0.0.1", engine="simulator", gpus=[], allocated=0, cpus=8,
                    memory_gb=64, labels=labels, taints=[], draining=False, last_heartbeat=0.0, **where)


def test_site_and_failure_domain_have_their_own_columns() -> None:
    rows = _node_rows([
        node("w1", {"berth.site": "eu-west", "berth.failure-domain": "rack-a", "team": "ml"}, site="eu-west",
             failure_domain="rack-a"),
        node("n0", {})])
    assert [(row["id"], row["site"], row["failure_domain"], row["labels"]) for row in rows] == [
        ("w1", "eu-west", "rack-a", "team=ml"), ("n0", "-", "-", "")]


def test_explain_names_every_outcome_and_the_site_terms() -> None:
    assert {"outside_sites", "site_full", "site_taken"} <= set(OUTCOMES) <= set(get_args(NodeOutcome))
    assert score_line(ScoreTerms(model_on_node=False, free_gpus=2, order=1, preferred_site=True,
                                 pool_copies_in_domain=1)) == (
        "#1: preferred site, 1 of the pool's copies in its failure domain, model not on node, 2 free")
    assert score_line(ScoreTerms(model_on_node=True, free_gpus=1, order=2)) == "#2: model on node, 1 free"
