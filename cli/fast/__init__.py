"""Fast paths: command lines `berth` answers without Typer, Rich, pydantic or httpx, whose imports are most of
a command's start (issue 33: 190 ms of CPU against a 150 ms goal for `berth workflow list`).

FAST_COMMANDS is the one list of them: a command's words, the options it takes (each with its values) and the
module whose `run(options)` answers it. cli/main.py offers every command line here first; one that is not
exactly a listed command with valid options (`--help`, an unknown or repeated option, a value Typer would
refuse, `--`) goes to Typer, as does one whose fast path declines to answer (`run` returns None: a setting it
leaves to the normal path to judge), so that the answer never differs from Typer's. A command joins by a row
here, a module in this package, and a case in tests/cli/test_fast_paths.py comparing both paths' output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module

from cli.output import Format


@dataclass(frozen=True)
class FastOption:
    """An option with a value out of `choices`, as Click reads it: `--name V`, `--name=V`, `-x V`, `-xV`."""

    long: str
    short: str
    choices: tuple[str, ...]
    default: str


@dataclass(frozen=True)
class FastCommand:
    words: tuple[str, ...]
    module: str  # its `run(options: Mapping[str, str]) -> int | None`: the exit code, or None to leave it to Typer
    options: tuple[FastOption, ...]


OUTPUT = FastOption("--output", "-o", tuple(choice.value for choice in Format), Format.TABLE.value)
FAST_COMMANDS = (
    FastCommand(("workflow", "list"), "cli.fast.workflow_list", (OUTPUT,)),
)


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of the fast path that answered `argv` (the arguments after `berth`), or None when none
    did and Typer must."""
    for command in FAST_COMMANDS:
        if tuple(argv[:len(command.words)]) == command.words:
            options = parse_options(argv[len(command.words):], command.options)
            if options is None:
                return None
            run = import_module(command.module).run
            code: int | None = run(options)
            return code
    return None


def parse_options(argv: Sequence[str], accepted: Sequence[FastOption]) -> Mapping[str, str] | None:
    """`argv`'s options by long name (defaults filled in), or None when anything in it is not plainly one
    of `accepted` with one of its choices: Typer answers those, with its own help or refusal."""
    values: dict[str, str] = {}
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        option, value = _split(token, accepted)
        if option is None or option.long in values:
            return None
        if value is None:
            if not rest:
                return None
            value = rest.pop(0)
        if value not in option.choices:
            return None
        values[option.long] = value
    return {option.long: values.get(option.long, option.default) for option in accepted}


def _split(token: str, accepted: Sequence[FastOption]) -> tuple[FastOption | None, str | None]:
    """The option a token names and the value it carries (`--output=json`, `-ojson`), if any."""
    for option in accepted:
        if token in (option.long, option.short):
            return option, None
        if token.startswith(option.long + "="):
            return option, token[len(option.long) + 1:]
        if token.startswith(option.short) and not token.startswith("--") and len(token) > len(option.short):
            return option, token[len(option.short):]
    return None, None
