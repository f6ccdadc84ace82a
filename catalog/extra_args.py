"""ExtraArgs is an allow-list (security issue 29, finding 2): each word must be a `vllm serve` flag Berth lets
users set, with a value of the flag's type. Refused at submission, one line each:

- a word vLLM would not read as a flag or its value, an unknown flag, an ambiguous abbreviation (catalog/
  engine_args.py reads the words exactly as vLLM does);
- a flag Berth sets (catalog/berth_flags.py, checked first, its messages kept);
- a value of the wrong type or not among the flag's choices (numbers, switches, enums, vLLM's registries);
- a flag that takes JSON (hf-overrides, speculative-config, kv-transfer-config, every `--*-config`): its keys
  reach into vLLM's configuration, where they can name files, models, hosts or classes to load, and no check
  here could follow every key of every config class. A few JSON flags that only set what a request may set
  itself (chat-template kwargs, sampling defaults, per-prompt media limits, CORS lists) are taken as plain data;
- a flag that takes free text, unless SAFE_TEXT lists it, and those listed in REFUSED for their own reason;
- a path (chat-template, tokenizer, download-dir, generation-config, ssl-*, …) unless it is relative and stays
  inside the copy's own model directory once normalised: no leading `/`, no `..` out of it. The node resolves
  such a path against the model directory (`in_model_dir`), never against the rank's working directory.

Flags that make vLLM run code (catalog/engine_flags.py) pass here untouched: the submission refuses them unless
the administrator allows code (BERTH_ALLOW_TRUST_REMOTE_CODE), with their own message.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from berth.errors import UserInputError, shown
from catalog.berth_flags import extra_args_refusal
from catalog.engine_args import HELP, Flag, Unreadable, Use, read_words
from catalog.engine_flags import CODE_FLAGS

_GPUS = "Berth assigns each rank its GPUs and sizes each copy from GpusPerNode and Nodes"
_REQUEST_TENSORS = "it has the engine unpickle tensors each request sends (torch.load), which can run code"
# Flags of an allowed type refused all the same (the first option string → why), and free-text flags whose
# refusal deserves its reason rather than the general one.
REFUSED: dict[str, str] = {
    "--help": "it prints help and exits, so the copy would never start",
    "--device-ids": _GPUS,
    "--prefill-context-parallel-size": _GPUS,
    "--enable-elastic-ep": "it lets the engine add data-parallel ranks Berth did not place",
    "--elastic-ep-max-dp-size": "it lets the engine add data-parallel ranks Berth did not place",
    "--distributed-executor-backend": "Berth starts and places the ranks itself (mp)",
    "--trust-request-chat-template": "it lets each request bring a chat template, a Jinja program vLLM renders",
    "--trust-request-mm-kwargs": "it lets each request set the multimodal processor's arguments",
    "--enable-prompt-embeds": _REQUEST_TENSORS,
    "--enable-mm-embeds": _REQUEST_TENSORS,
    "--lora-modules": "it loads adapters from paths or repositories of the sender's choosing",
    "--hf-token": "it puts a credential on the command line; give HfTokenSecret instead",
    "--revision": "Berth downloads the weights; pin the revision in Model (hf://org/name@revision)",
    "--code-revision": "Berth downloads the weights; pin the revision in Model (hf://org/name@revision)",
    "--tokenizer-revision": "Berth downloads the weights; pin the revision in Model (hf://org/name@revision)",
    "--tool-server": "it has the engine call servers of the sender's choosing",
    "--otlp-traces-endpoint": "it sends traces, prompts among them, to a host of the sender's choosing",
    "--log-config-file": "a logging configuration file can instantiate any class",
    "--scheduler-cls": "it imports a class of the sender's choosing",
    "--io-processor-plugin": "it loads a plugin of the sender's choosing",
    "--mm-encoder-fp8-scale-save-path": "it writes a file on the node",
}
# Why a JSON flag is refused, where there is more to say than the general reason (_JSON_WHY).
JSON_WHY: dict[str, str] = {
    "--hf-overrides": "it rewrites the model's configuration, whose auto_map names code to load",
    "--speculative-config": "it names a draft model, or a class, to load from anywhere",
    "--kv-transfer-config": "it names a connector module to import and hosts to reach",
    "--ec-transfer-config": "it names a connector module to import and hosts to reach",
    "--compilation-config": "it names directories vLLM writes to and passes settings to the compiler",
    "--model-loader-extra-config": "it configures loaders that read from URIs of the sender's choosing",
}
_JSON_WHY = "its keys reach into vLLM's configuration, where they can name files, models, hosts or classes to load"
# Choice flags narrowed further: the first option string → (the choices refused, why).
NARROWED: dict[str, tuple[frozenset[str], str]] = {
    "--load-format": (frozenset({"tensorizer", "runai_streamer", "runai_streamer_sharded", "modelexpress",
                                 "ipc_cache", "npcache"}),
                      "it reads the weights from elsewhere than the copy's model directory, or writes beside them"),
    "--spec-method": (frozenset({"custom_class"}), "it imports a class of the sender's choosing"),
}
# Free-text flags whose value is only a name or a list of names vLLM matches against (no path, host or code).
SAFE_TEXT = dict.fromkeys(("--response-role", "--disable-access-log-for-endpoints", "--allowed-media-domains"), True)
# JSON flags taken as plain data: what each sets is what a request may set for itself, or a CORS list.
DATA_JSON: dict[str, str] = {
    "--default-chat-template-kwargs": "object",
    "--override-generation-config": "object",
    "--limit-mm-per-prompt": "object",
    "--allowed-origins": "strings",
    "--allowed-methods": "strings",
    "--allowed-headers": "strings",
}
_PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9._@+/-]+$")
_HUMAN_NUMBER = re.compile(r"^(\d+(\.\d+)?)([kKmMgGtT])$")
_TEXT = re.compile(r"^[\x20-\x7e]{1,256}$")


def engine_args_refusal(words: Sequence[str]) -> str | None:
    """Why ExtraArgs may not hold these words (the first problem, one line), or None."""
    refusal = extra_args_refusal(words)
    if refusal:
        return refusal
    try:
        uses = read_words(words)
    except Unreadable as error:
        return str(error)
    for use in uses:
        problem = _use_problem(use)
        if problem:
            return problem
    return None


def check_engine_args(words: Sequence[str]) -> None:
    refusal = engine_args_refusal(words)
    if refusal:
        raise UserInputError(refusal)


def _use_problem(use: Use) -> str | None:
    flag = use.flag
    if flag.listed(CODE_FLAGS):
        return None  # the submission decides, with the administrator's setting (catalog/engine_flags.py)
    if use.problem:
        return use.problem
    # berth_flags refused every spelling of Berth's flags before the words were read; the option they resolved
    # to is asked again, so no reading of the two modules can differ on what is Berth's.
    owned = extra_args_refusal([use.option])
    if owned:
        return owned
    refused = flag.listed(REFUSED)
    if refused:
        return f"ExtraArgs may not set {use.shown()}: {refused}."
    if use.dotted or flag.kind == "json":
        return _json_problem(use)
    for value in use.values:
        problem = _value_problem(use, value)
        if problem:
            return problem
    return None


def _value_problem(use: Use, value: str) -> str | None:
    flag = use.flag
    if flag.optional and value in ("", "None"):
        return None
    if flag.kind in ("int", "float"):
        return _number_problem(use, value)
    if flag.choices:
        return _choice_problem(use, value)
    if flag.path:
        return _path_problem(use, value)
    if flag.listed(SAFE_TEXT):
        if _TEXT.match(value):
            return None
        return f"ExtraArgs {use.shown()} takes a short printable name, not '{shown(value)}'."
    return (f"ExtraArgs may not set {use.shown()}: it takes free text that Berth does not check "
            f"(a path, a host or a name to import); {HELP}.")


def _number(flag: Flag, value: str) -> float | None:
    """The value as vLLM's type for the flag reads it, or None when it does not."""
    text = value.strip()
    if flag.numbers == "human-or-auto" and (text == "-1" or text.lower() == "auto"):
        return -1
    human = _HUMAN_NUMBER.match(text) if flag.numbers else None
    if human:  # vLLM's human_readable_int: 25.6k = 25600 (decimal), 2K = 2048 (binary, whole numbers only)
        number, decimals, suffix = human.groups()
        base = 1024 if suffix.isupper() else 1000
        if base == 1024 and decimals:
            return None
        return float(number) * base ** ("kmgt".index(suffix.lower()) + 1)
    try:
        number = int(text) if flag.kind == "int" else float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _number_problem(use: Use, value: str) -> str | None:
    number = _number(use.flag, value)
    if number is None:
        what = "a whole number" if use.flag.kind == "int" else "a finite number"
        return f"ExtraArgs {use.shown()} takes {what}, not '{shown(value)}'."
    if use.flag.choices and number not in use.flag.choices:
        return _not_a_choice(use, value)
    return None


def _choice_problem(use: Use, value: str) -> str | None:
    flag = use.flag
    folded = value.upper() if flag.fold == "upper" else value.lower().replace("-", "_") if flag.fold == "snake" \
        else value
    if folded not in flag.choices:
        return _not_a_choice(use, value)
    refused, why = flag.listed(NARROWED) or (frozenset(), "")
    if folded in refused:
        return f"ExtraArgs may not give {use.shown()} '{shown(value)}': {why}."
    return None


def _not_a_choice(use: Use, value: str) -> str:
    refused = (use.flag.listed(NARROWED) or (frozenset(), ""))[0]
    choices = [str(choice) for choice in use.flag.choices if choice not in refused]
    listed = ", ".join(choices[:60]) + (", …" if len(choices) > 60 else "")
    return f"ExtraArgs {use.shown()} takes one of {listed}; not '{shown(value)}'."


def _path_problem(use: Use, value: str) -> str | None:
    if value in use.flag.keywords:
        return None
    normal = posixpath.normpath(value) if value else ""
    if not _PATH_CHARACTERS.match(value) or value.startswith("/") or normal == ".." or normal.startswith("../"):
        example = "chat_template.jinja" if use.flag.name == "--chat-template" else "subdir/file"
        keywords = f" (or {' or '.join(use.flag.keywords)})" if use.flag.keywords else ""
        return (f"ExtraArgs may not give {use.shown()} the path '{shown(value)}': a path in ExtraArgs is relative "
                f"to the model's directory and stays inside it (no leading /, no .., only letters, digits and "
                f"._-+@/), e.g. {use.flag.name} {example}{keywords}.")
    return None


def _json_problem(use: Use) -> str | None:
    flag = use.flag
    shape = flag.listed(DATA_JSON)
    if flag.kind != "json":
        return f"ExtraArgs {use.shown()} sets a JSON key, but {flag.name} takes no JSON: write {flag.name} VALUE."
    if shape is None:
        return f"ExtraArgs may not set {use.shown()}: it takes JSON, and {flag.listed(JSON_WHY) or _JSON_WHY}."
    data = _dotted_value(use) if use.dotted else _loads(use.values[0])
    if not _is_shape(data, shape):
        wanted = "a JSON list of strings" if shape == "strings" else \
            "a JSON object of plain values (strings, numbers, true/false, lists of them)"
        return f"ExtraArgs {use.shown()} takes {wanted}, not '{shown(use.values[0])}'."
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: `[[[[…` nested past the interpreter's limit
        return None


def _dotted_value(use: Use) -> Any:
    """What vLLM makes of `--name.a.b value`: {"a": {"b": value}}, the value read as JSON, else as text."""
    text = use.values[0]
    value: Any = json.dumps(text.split(",")) if use.appended else text
    parsed = _loads(value)
    data: Any = parsed if parsed is not None or value == "null" else value
    for key in reversed(use.dotted):
        data = {key: data}
    return data


def _is_plain(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return not isinstance(value, str) or len(value) <= 1024
    if isinstance(value, list):
        return depth < 2 and all(_is_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return depth < 2 and all(isinstance(key, str) and _is_plain(item, depth + 1) for key, item in value.items())
    return False


def _is_shape(data: Any, shape: str) -> bool:
    if shape == "strings":
        return isinstance(data, list) and all(isinstance(item, str) and _TEXT.match(item) for item in data)
    return isinstance(data, dict) and _is_plain(data)


def in_model_dir(words: Sequence[str], model_dir: str) -> list[str]:
    """The words with each path value (a relative path the check let through) made absolute inside the copy's
    model directory: vLLM would otherwise resolve it against the rank's working directory. Words the reader
    cannot read (a definition stored before the check) are left as they are."""
    result = list(words)
    try:
        uses = read_words(words)
    except Unreadable:
        return result
    for use in uses:
        if not use.flag.path or not use.values:
            continue
        value = use.values[0]
        if value in use.flag.keywords or value.startswith("/") or (use.flag.optional and value in ("", "None")):
            continue
        absolute = posixpath.normpath(posixpath.join(model_dir, value))
        if use.glued:
            result[use.index] = f"{words[use.index].partition('=')[0]}={absolute}"
        else:
            result[use.index + 1] = absolute
    return result
