"""Issue 31, item 6: `/v1/models` through the endpoint proxy is byte for byte what the serving document
shows (LiteLLM's compact listing, which carries no `root`): the proxy re-serialises a listing only when it
replaces a vLLM card's `root` (a path on the node) with its id, and then compactly, as the servers do."""

from __future__ import annotations

import json

from gateway.endpoint.model_cards import scrub

DOCUMENTED = (b'{"data":[{"id":"openai/gpt-oss-20b","object":"model","created":1677610602,'
              b'"owned_by":"openai"}],"object":"list"}')  # the serving document's sample, exactly


def test_a_litellm_listing_passes_byte_for_byte() -> None:
    assert scrub(DOCUMENTED) == DOCUMENTED
    assert scrub(b'{"data":[],"object":"list"}') == b'{"data":[],"object":"list"}'


def test_a_vllm_card_loses_its_node_path_and_stays_compact() -> None:
    vllm = (b'{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"vllm",'
            b'"root":"/var/lib/berth/state/models/abc","parent":null,"max_model_len":8192}]}')
    scrubbed = scrub(vllm)
    assert b"/var/lib/berth" not in scrubbed and b", " not in scrubbed and b": " not in scrubbed
    assert json.loads(scrubbed)["data"][0] == {**json.loads(vllm)["data"][0], "root": "m"}
    assert scrub(scrubbed) == scrubbed  # already scrubbed: untouched
