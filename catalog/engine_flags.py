"""ExtraArgs flags that make vLLM run code of the sender's choosing: refused unless the administrator allows
it (`BERTH_ALLOW_TRUST_REMOTE_CODE`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from berth.errors import UserInputError

# Flag (as vLLM spells it) → what it runs. --config reads any of these flags from a file on the node.
CODE_FLAGS: Final = {
    "--trust-remote-code": "it runs the Python code a model repository ships",
    "--tool-parser-plugin": "it imports a Python file of the sender's choosing",
    "--reasoning-parser-plugin": "it imports a Python file of the sender's choosing",
    "--worker-cls": "it imports a class of the sender's choosing",
    "--worker-extension-cls": "it imports a class of the sender's choosing",
    "--logits-processors": "it imports classes of the sender's choosing",
    "--logits-processor-pattern": "it lets each request import a class of the caller's choosing",
    "--middleware": "it imports code of the sender's choosing",
    "--config": "it reads further flags, these included, from a file on the node",
}
# Real flags that are also prefixes of a code flag: argparse takes an exact match as itself.
_PREFIX_FLAGS: Final = frozenset({"--reasoning-parser"})
ALLOW_SETTING: Final = "BERTH_ALLOW_TRUST_REMOTE_CODE"


def _flag_name(word: str) -> str:
    """How vLLM's parser reads a word's flag: before `=` and `.`, underscores as dashes."""
    name = word.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def code_flag(args: Iterable[str]) -> tuple[str, str] | None:
    """The first (word, reason) in `args` that names a code flag, or an abbreviation argparse would
    expand to one (`--trust-remote`), or None."""
    for word in args:
        if not word.startswith("--") or word == "--":
            continue
        name = _flag_name(word)
        if name in CODE_FLAGS:
            return word, CODE_FLAGS[name]
        if name in _PREFIX_FLAGS:
            continue
        for flag, reason in CODE_FLAGS.items():
            if len(name) > 3 and flag.startswith(name):
                return word, reason
    return None


def refuse_code_flags(parameter: str, args: Iterable[str], allowed: bool) -> None:
    """Raise UserInputError (one line) when `args` carries a code flag and the cluster does not allow it."""
    if allowed:
        return
    found = code_flag(args)
    if found is not None:
        word, reason = found
        raise UserInputError(
            f"{parameter} may not carry {word}: {reason}, and this cluster does not allow that "
            f"(an administrator can set {ALLOW_SETTING}=true). Remove it and try again."
        )
