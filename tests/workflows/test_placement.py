"""What the pool asks for when it places a copy, on its own: the copy's ID, shape, weights and revision."""

from __future__ import annotations

from tests.workflows.harness import OWNER, TIMINGS, pool_definition
from workflows.payloads import PoolInput, WeightsResult
from workflows.placement import new_copy


def test_a_new_copy_carries_the_pools_shape_and_its_revision() -> None:
    input = PoolInput(workflow_id="pool-1", endpoint_id="ep-1", owner=OWNER, definition=pool_definition(nodes=2),
                      timings=TIMINGS)
    copy = new_copy(input, "/models/tiny", 3, 2, WeightsResult(model_dir="/models/tiny", digest="abc"), "pool-1")
    assert (copy.copy_id, copy.copy_index, copy.revision) == ("pool-1.copy-3", 3, 2)
    assert (copy.nodes, copy.gpus_per_node, copy.model_dir) == (2, 1, "/models/tiny")
    assert copy.engine.served_model_name == "tiny-model"
    assert (copy.parent_workflow_id, copy.endpoint_id, copy.timings) == ("pool-1", "ep-1", TIMINGS)
    assert copy.volume is None
    assert copy.model_digest is None  # only a registered model's copies carry the digest


def test_a_registered_models_copies_carry_its_digest() -> None:
    definition = pool_definition().model_copy(update={"model_ref": "model://smol"})
    input = PoolInput(workflow_id="pool-1", endpoint_id="ep-1", owner=OWNER, definition=definition, timings=TIMINGS)
    copy = new_copy(input, "/models/smol", 0, 1, WeightsResult(model_dir="/models/smol", digest="abc"), "pool-1")
    assert copy.model_digest == "abc"
    assert new_copy(input, "/models/smol", 0, 1, None, "pool-1").model_digest is None
