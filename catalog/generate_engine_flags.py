"""Write catalog/engine_flags.json, the table of `vllm serve` options the ExtraArgs check reads, from the
installed vLLM's own argument parser (catalog/extra_args.py reads it; Berth never imports vLLM).

Run it with the vLLM virtualenv's Python whenever the pinned vLLM changes (mk/engines.mk):

    .venv-vllm/bin/python catalog/generate_engine_flags.py              # rewrites catalog/engine_flags.json
    .venv-vllm/bin/python catalog/generate_engine_flags.py OTHER.json   # writes it elsewhere (the test compares)

It imports only vLLM and the standard library: Berth is not installed in that virtualenv. What it records are
facts of the parser (option strings, how many values, their type and choices), plus two decisions kept here
because they are about the values: which string flags name a path (PATH_FLAGS), and the names vLLM looks up
in a registry for a few string flags (registry_choices), so the check can take them as a choice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

TABLE = Path(__file__).resolve().parent / "engine_flags.json"

# String flags whose value names a file or directory that vLLM reads → the words that are not a path.
# ExtraArgs takes them only as a relative path inside the copy's own model directory (catalog/extra_args.py).
PATH_FLAGS: dict[str, tuple[str, ...]] = {
    "--chat-template": (),
    "--tokenizer": (),
    "--hf-config-path": (),
    "--generation-config": ("auto", "vllm"),
    "--download-dir": (),
    "--allowed-local-media-path": (),
    "--mm-encoder-fp8-scale-path": (),
    "--ssl-keyfile": (),
    "--ssl-certfile": (),
    "--ssl-ca-certs": (),
}
_HUMAN_INTS = {"human_readable_int": "human", "human_readable_int_or_auto": "human-or-auto"}


def registry_choices() -> dict[str, tuple[list[str], str | None]]:
    """String flags vLLM resolves through a registry or an enum → (the names, how vLLM folds the case)."""
    from vllm.config.mamba import MambaBackendEnum
    from vllm.config.model import ModelImpl, TokenizerMode
    from vllm.config.vllm import OptimizationLevel
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.model_executor.model_loader import LoadFormats
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    from vllm.transformers_utils.config import ConfigFormat
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return {
        "--tool-call-parser": (ToolParserManager.list_registered(), None),
        "--reasoning-parser": (ReasoningParserManager.list_registered(), None),
        "--quantization": (list(QUANTIZATION_METHODS), None),
        "--model-impl": (list(get_args(ModelImpl)), None),
        "--tokenizer-mode": (list(get_args(TokenizerMode)), None),
        "--config-format": (list(get_args(ConfigFormat)), None),
        "--load-format": (list(get_args(LoadFormats)), None),
        "--optimization-level": ([str(level.value) for level in OptimizationLevel], None),
        "--attention-backend": (list(AttentionBackendEnum.__members__), "upper"),
        "--mamba-backend": (list(MambaBackendEnum.__members__), "upper"),
    }


def _unwrap(kind: Any) -> tuple[Any, bool]:
    """vLLM's `optional_type(T)` and `parse_type(T)` wrappers → (T, whether '' and 'None' mean None)."""
    optional = False
    while getattr(kind, "__closure__", None) and getattr(kind, "__qualname__", "").startswith(
            ("optional_type.", "parse_type.")):
        optional = optional or kind.__qualname__.startswith("optional_type.")
        kind = kind.__closure__[0].cell_contents
    return kind, optional


def _value_kind(action: argparse.Action) -> dict[str, Any]:
    """How the option's value is typed: int, float, str or json (anything parsed as JSON or a config)."""
    kind, optional = _unwrap(action.type)
    name = getattr(kind, "__name__", "")
    facts: dict[str, Any] = {"optional": optional} if optional else {}
    if kind is int or name in _HUMAN_INTS:
        facts["kind"] = "int"
        if name in _HUMAN_INTS:
            facts["numbers"] = _HUMAN_INTS[name]
    elif kind is float:
        facts["kind"] = "float"
    elif name in ("loads", "parse_dataclass", "union_dict_and_str"):
        facts["kind"] = "json"
    else:
        facts["kind"] = "str"
        if callable(kind) and kind is not str and name == "<lambda>":
            # vLLM's own normalisers (`lambda s: s.lower().replace("-", "_")`) before the choices are checked.
            facts["fold"] = "snake" if _folds_snake(kind) else "custom"
    return facts


def _folds_snake(kind: Any) -> bool:
    try:
        return bool(kind("Ab-C") == "ab_c")
    except (TypeError, ValueError):
        return False


def describe(action: argparse.Action, registries: dict[str, tuple[list[str], str | None]]) -> dict[str, Any]:
    """One option as the ExtraArgs check needs it."""
    options = list(action.option_strings)
    flag: dict[str, Any] = {"options": options, "dest": action.dest}
    if action.nargs == 0:
        flag["kind"] = "bool"
        return flag
    flag.update(_value_kind(action))
    if action.nargs is not None:
        flag["nargs"] = action.nargs
    if isinstance(action, argparse._AppendAction):
        flag["append"] = True
    if action.choices is not None:
        flag["choices"] = [choice for choice in action.choices if choice is not None]
    elif options[0] in registries:
        names, fold = registries[options[0]]
        flag["choices"] = sorted(names)
        if fold:
            flag["fold"] = fold
    if options[0] in PATH_FLAGS:
        flag["path"] = True
        if PATH_FLAGS[options[0]]:
            flag["keywords"] = list(PATH_FLAGS[options[0]])
    return flag


def build() -> dict[str, Any]:
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # `vllm serve`'s parser is a FlexibleArgumentParser subparser made by make_arg_parser
    # (vllm/entrypoints/cli/serve.py); the option strings, abbreviation rule and prefix are what matter.
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    registries = registry_choices()
    flags = [describe(action, registries) for action in parser._actions if action.option_strings]
    missing = (set(PATH_FLAGS) | set(registries)) - {option for flag in flags for option in flag["options"]}
    if missing:
        raise SystemExit(f"vLLM {vllm.__version__} has no {', '.join(sorted(missing))}: update PATH_FLAGS")
    return {
        "generated_by": "catalog/generate_engine_flags.py",
        "vllm": vllm.__version__,
        "allow_abbrev": parser.allow_abbrev,
        "fromfile_prefix_chars": parser.fromfile_prefix_chars,
        "flags": sorted(flags, key=lambda flag: flag["options"][0]),
    }


def render(table: dict[str, Any]) -> str:
    """JSON with one flag per line, so a new vLLM's changes read as a diff of flags."""
    head = {key: value for key, value in table.items() if key != "flags"}
    lines = [json.dumps(flag, sort_keys=True) for flag in table["flags"]]
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    return body + ',\n "flags": [\n  ' + ',\n  '.join(lines) + '\n ]\n}\n'


def main(argv: list[str]) -> None:
    # A file, not stdout: vLLM logs to stdout while it builds the parser.
    Path(argv[0] if argv else TABLE).write_text(render(build()))


if __name__ == "__main__":
    main(sys.argv[1:])
