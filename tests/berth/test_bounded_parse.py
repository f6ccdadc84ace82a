"""berth/bounded_parse.py: the nesting scan agrees with the depth the parsers reach (brackets in strings and escaped
quotes do not count, unclosed ones do, UTF-16 bodies are read as json.loads reads them), stays fast, and the YAML
loader reads what yaml.safe_load reads but refuses anchors, aliases and deep nesting in one line."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from berth.bounded_parse import MAX_NESTING_DEPTH, TooDeep, json_depth_exceeds, load_json, load_yaml, load_yaml_all
from berth.errors import UserInputError


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    return 0


@pytest.mark.parametrize("depth", [1, MAX_NESTING_DEPTH - 1, MAX_NESTING_DEPTH])
def test_up_to_the_limit_is_read(depth: int) -> None:
    assert not json_depth_exceeds(_nested(depth))
    assert _depth(load_json(_nested(depth), "x")) == depth


@pytest.mark.parametrize("text", [_nested(MAX_NESTING_DEPTH + 1), "[" * 100_000,
                                  '{"a":' * 65 + "1" + "}" * 65, '[{"a": "x"}, ' + _nested(70) + "]"])
def test_past_the_limit_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(TooDeep) as refused:
        load_json(text, "The request body")
    assert str(refused.value) == "The request body nests JSON deeper than 64 levels; send a flatter document."


def test_brackets_in_strings_and_escaped_quotes_do_not_count() -> None:
    assert not json_depth_exceeds(json.dumps({"text": "[" * 1000 + '\\"{' * 500}))
    assert not json_depth_exceeds('["\\\\", "' + "[" * 200 + '"]')
    # An escaped backslash ends before the quote: what follows is outside the string.
    assert json_depth_exceeds('["\\\\", ' + "[" * 100 + "]" * 101)


def test_utf16_and_bytes_bodies_are_read_as_json_reads_them() -> None:
    for encoding in ("utf-16", "utf-16-le", "utf-32"):
        assert json_depth_exceeds(_nested(100).encode(encoding))
        assert not json_depth_exceeds(json.dumps({"a": "[" * 100}).encode(encoding))


@given(st.recursive(st.none() | st.integers() | st.text(alphabet='[]{}"\\ax', max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=200))
def test_the_scan_agrees_with_the_parsed_depth(value: object) -> None:
    text = json.dumps(value, ensure_ascii=False)
    for limit in (1, 3, 8):
        assert json_depth_exceeds(text, limit) == (_depth(value) > limit), text


def test_a_wide_megabyte_is_scanned_quickly() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": 'say "[{hi}]"'}] * 20_000}).encode()
    started = time.perf_counter()
    assert not json_depth_exceeds(body)
    assert time.perf_counter() - started < 1.0


def test_yaml_reads_as_safe_load() -> None:
    text = "a: 1\nb: [1, {c: two}]\nd:\n  - x\n  - y: null\n"
    assert load_yaml(text, "x") == yaml.safe_load(text)
    assert load_yaml("", "x") is None
    assert load_yaml_all("---\na: 1\n---\n---\nb: 2\n", "x") == [{"a": 1}, None, {"b": 2}]
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [\n", "x")


@pytest.mark.parametrize("text", ["a: &x 1\nb: *x\n", "a: &x 1\n", "base: &b {k: 1}\nother:\n  <<: *b\n"])
def test_yaml_anchors_and_aliases_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(UserInputError) as refused:
        load_yaml(text, "the file")
    assert str(refused.value) == ("YAML anchors and aliases (&name, *name, <<: *name) are not accepted in the file "
                                  "(line 1); write each value out.")


def test_deep_yaml_is_refused_before_the_composer_recurses() -> None:
    for text in ("[" * 100_000, "- " * 65 + "x\n", "a:\n" + "".join("  " * n + "b:\n" for n in range(1, 70))):
        with pytest.raises(TooDeep, match="the file nests YAML deeper than 64 levels"):
            load_yaml(text, "the file")
    assert load_yaml("- " * 64 + "x\n", "x") is not None
