"""ExtraArgs flags that make vLLM run code are found in every spelling vLLM's parser accepts."""

from __future__ import annotations

import pytest

from berth.errors import UserInputError
from catalog.engine_flags import code_flag, refuse_code_flags


@pytest.mark.parametrize("word", ["--trust-remote-code", "--trust_remote_code", "--trust-remote-code=true",
                                  "--trust-remote-code=false", "--trust-remote", "--tool-parser-plugin=x.py",
                                  "--worker_extension_cls", "--config", "--middleware=a.b"])
def test_code_flags_are_found(word: str) -> None:
    found = code_flag(["--enforce-eager", word, "x"])
    assert found is not None and found[0] == word


@pytest.mark.parametrize("args", [["--no-trust-remote-code"], ["--reasoning-parser", "deepseek_r1"],
                                  ["--enable-auto-tool-choice", "--tool-call-parser", "openai"],
                                  ["--compilation-config.level", "3"], []])
def test_ordinary_flags_pass(args: list[str]) -> None:
    assert code_flag(args) is None


def test_refusal_names_the_flag_and_the_setting_unless_allowed() -> None:
    with pytest.raises(UserInputError) as refused:
        refuse_code_flags("ExtraArgs", ["--trust-remote-code"], allowed=False)
    message = str(refused.value)
    assert message.startswith("ExtraArgs may not carry --trust-remote-code: ") and "\n" not in message
    assert "BERTH_ALLOW_TRUST_REMOTE_CODE=true" in message
    refuse_code_flags("ExtraArgs", ["--trust-remote-code"], allowed=True)
