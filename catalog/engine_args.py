"""Read ExtraArgs words as `vllm serve` reads them: which option each word sets and with which values, from the
table its own parser gave (catalog/engine_flags.json, written by catalog/generate_engine_flags.py).

vLLM first rewrites the command line (vllm/utils/argparse_utils.py, FlexibleArgumentParser.parse_args), then
argparse reads it. Both steps are followed here, so no spelling reaches vLLM as another flag than the check saw:
underscores in a `--` name become dashes (up to the first `.`); `-O3`, `-O=3` and `-O 3` become
`--optimization-level 3`; `--name.key value` (and `--name.key+ a,b`) becomes `--name '{"key": value}'`, taking
the next word whatever it is; argparse then matches `--name=value`, a unique prefix of a long option
(`allow_abbrev`), a short option with its value glued on (`-qawq`), and takes values only from words that are
not options (negative numbers are values). Where vLLM would refuse the line (an ambiguous prefix, a missing
value, a switch given a value, a word no option takes), the reader refuses it first, in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from berth.errors import shown

TABLE_PATH = Path(__file__).resolve().parent / "engine_flags.json"
# Flags only the engine simulator reads (simulator/cli.py); vLLM has no such option, and a catalog entry passes
# it through ExtraArgs to make a canary fail (issue 17).
SIMULATOR_FLAGS: tuple[dict[str, Any], ...] = (
    {"options": ["--fail-share"], "dest": "fail_share", "kind": "float"},
)
_NEGATIVE_INTEGER = re.compile(r"^-\d+$")
# `-O3`: vLLM's optimization levels are single digits; `-O <n>` takes the next word only when it is one.
_OPTIMIZATION_LEVELS = frozenset({"0", "1", "2", "3"})
HELP = 'see docs/catalog.md "ExtraArgs" for the flags it takes'


V = TypeVar("V")


class Unreadable(ValueError):
    """ExtraArgs that vLLM would refuse to start with, or read otherwise than as written: one sentence."""


@dataclass(frozen=True)
class Flag:
    """One option of `vllm serve` as engine_flags.json records it."""

    options: tuple[str, ...]
    dest: str
    kind: str  # bool, int, float, str or json
    nargs: int | str | None = None  # None: one value; "?", "+", "*"; 0 for switches
    choices: tuple[Any, ...] = ()
    optional: bool = False  # '' and 'None' mean None
    numbers: str = ""  # "human": 1k, 2M also; "human-or-auto": and -1 / auto
    fold: str = ""  # "upper", "snake": how vLLM normalises a choice before it compares
    path: bool = False  # the value names a file or directory vLLM reads
    keywords: tuple[str, ...] = ()  # words a path flag takes that are not paths
    append: bool = False

    @property
    def name(self) -> str:
        return self.options[0]

    def listed(self, table: Mapping[str, V]) -> V | None:
        """What `table` says of this flag under any of its option strings (`-h` is `--help`)."""
        return next((table[option] for option in self.options if option in table), None)

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"


@dataclass(frozen=True)
class Use:
    """One flag as ExtraArgs sets it. `index` is the word that names it; a value glued on (`=`) is in that word,
    otherwise the values are the words right after it."""

    written: str  # the option as the user wrote it (before any `=` value)
    option: str  # the option string vLLM resolves it to (`--no-enforce-eager`, `-q`)
    flag: Flag
    values: tuple[str, ...]
    index: int
    end: int  # the index after its last word
    glued: bool = False
    dotted: tuple[str, ...] = ()  # `--name.a.b value`: ("a", "b"); the value is then JSON-ish
    appended: bool = False  # `--name.key+ a,b`: a list
    problem: str | None = None  # why vLLM would refuse it (kept, not raised: a code flag's refusal comes first)

    def shown(self) -> str:
        """How a message names the flag: as written, and what vLLM reads when that differs."""
        return self.option if self.written == self.option else f"{self.written} (vLLM reads it as {self.option})"


@dataclass(frozen=True)
class FlagTable:
    """Every option string of `vllm serve` → its flag."""

    by_option: dict[str, Flag]
    vllm: str

    def resolve(self, word: str) -> tuple[str, Flag, str | None]:
        """(option string, flag, glued value) for an option word, as argparse's _parse_optional reads it."""
        if word in self.by_option:
            return word, self.by_option[word], None
        key, equals, value = word.partition("=")
        if equals and key in self.by_option:
            return key, self.by_option[key], value
        matches: list[tuple[str, str | None]] = []
        if word.startswith("--"):
            matches = [(option, value if equals else None) for option in self.by_option if option.startswith(key)]
        else:
            matches = [(option, word[2:]) for option in self.by_option if option == word[:2]]
            matches += [(option, None) for option in self.by_option if option.startswith(word)]
        if len(matches) > 1:
            options = ", ".join(option for option, _ in matches[:8]) + (", …" if len(matches) > 8 else "")
            raise Unreadable(f"ExtraArgs flag {shown(key)} is ambiguous: vLLM could read it as {options}. "
                             "Write the flag in full.")
        if not matches:
            raise Unreadable(f"ExtraArgs has no vLLM flag {shown(key)}: check its spelling; {HELP}.")
        option, glued = matches[0]
        return option, self.by_option[option], glued


def _flag(data: dict[str, Any]) -> Flag:
    return Flag(options=tuple(data["options"]), dest=data["dest"], kind=data["kind"], nargs=data.get("nargs"),
                choices=tuple(data.get("choices", ())), optional=data.get("optional", False),
                numbers=data.get("numbers", ""), fold=data.get("fold", ""), path=data.get("path", False),
                keywords=tuple(data.get("keywords", ())), append=data.get("append", False))


@lru_cache(maxsize=1)
def flag_table() -> FlagTable:
    data = json.loads(TABLE_PATH.read_text())
    # The reader follows argparse's rules for a parser with these settings; another vLLM could change them.
    if not data["allow_abbrev"] or data["fromfile_prefix_chars"] is not None:
        raise RuntimeError(f"{TABLE_PATH}: vLLM's parser changed how it reads words; update catalog/engine_args.py")
    by_option: dict[str, Flag] = {}
    for entry in [*data["flags"], *SIMULATOR_FLAGS]:
        flag = _flag(entry)
        by_option.update(dict.fromkeys(flag.options, flag))
    return FlagTable(by_option=by_option, vllm=data["vllm"])


def _is_value(word: str) -> bool:
    """A word argparse hands to an option as its value, and vLLM's rewriting leaves as it is."""
    return not word.startswith("-") or word == "-" or bool(_NEGATIVE_INTEGER.match(word))


def _vllm_spelling(word: str) -> str:
    """vLLM's rewrite of a `--` word: underscores to dashes in the name, up to the first `.` and before `=`."""
    if not word.startswith("--"):
        return word
    key, equals, value = word.partition("=")
    name, dot, rest = key[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + rest + equals + value


def read_words(words: Sequence[str], table: FlagTable | None = None) -> list[Use]:
    """Every flag the words set, in order. Raises Unreadable (one line) where vLLM would not start, or would read
    a word otherwise than as an option or its value."""
    table = table or flag_table()
    uses: list[Use] = []
    index = 0
    while index < len(words):
        use = _read_one(words, index, table)
        uses.append(use)
        index = use.end
    return uses


def _read_one(words: Sequence[str], index: int, table: FlagTable) -> Use:
    word = words[index]
    if word == "--" or _is_value(word):
        raise Unreadable(f"ExtraArgs word '{shown(word)}' is neither a vLLM flag nor the value of one: Berth gives "
                         "the model itself, and a value with spaces needs quotes.")
    if word.startswith("-O") and not word.startswith("--"):
        return _optimization_level(words, index, table)
    spelled = _vllm_spelling(word)
    key = spelled.partition("=")[0]
    if "." in key:
        return _dotted(words, index, spelled, table)
    option, flag, glued = table.resolve(spelled)
    written = word.partition("=")[0]
    if not flag.takes_value:
        if glued is not None:
            problem = (f"ExtraArgs {shown(written)} is a switch and takes no value: write {flag.name}"
                       + (f" or {flag.options[1]}." if len(flag.options) > 1 else "."))
            return Use(written, option, flag, (glued,), index, index + 1, glued=True, problem=problem)
        return Use(written, option, flag, (), index, index + 1)
    if glued is not None:
        return Use(written, option, flag, (glued,), index, index + 1, glued=True)
    following = words[index + 1:]
    taken = 0
    while taken < len(following) and _is_value(following[taken]) and (taken == 0 or flag.nargs in ("+", "*")):
        taken += 1
    if taken == 0 and flag.nargs not in ("?", "*"):
        raise Unreadable(f"ExtraArgs {shown(written)} needs a value: write {flag.name} VALUE.")
    return Use(written, option, flag, tuple(following[:taken]), index, index + 1 + taken)


def _optimization_level(words: Sequence[str], index: int, table: FlagTable) -> Use:
    word = words[index]
    flag = table.by_option["--optimization-level"]
    if word != "-O":
        level = word[3:] if word[2] == "=" else word[2:]
        return Use(word.partition("=")[0], flag.name, flag, (level,), index, index + 1, glued=True)
    if index + 1 < len(words) and words[index + 1] in _OPTIMIZATION_LEVELS:
        return Use(word, flag.name, flag, (words[index + 1],), index, index + 2)
    raise Unreadable("ExtraArgs -O needs a level: write -O0, -O1, -O2 or -O3.")


def _dotted(words: Sequence[str], index: int, spelled: str, table: FlagTable) -> Use:
    """`--name.a.b value`: vLLM takes the next word as the value, whatever it is, and passes `--name JSON`."""
    key, equals, value = spelled.partition("=")
    written = words[index].partition("=")[0]
    appended = key.endswith("+")
    base, *path = key.removesuffix("+").split(".")
    if not equals:
        if index + 1 >= len(words):
            raise Unreadable(f"ExtraArgs {shown(written)} needs a value: write {shown(written)} VALUE.")
        value = words[index + 1]
    option, flag, glued = table.resolve(base)
    if glued is not None or not flag.takes_value:
        raise Unreadable(f"ExtraArgs {shown(written)} sets a key of {flag.name}, which takes no JSON.")
    return Use(written, option, flag, (value,), index, index + (1 if equals else 2), glued=bool(equals),
               dotted=tuple(path), appended=appended)
