"""Security issue 29, finding 2: `ExtraArgs` read files of the node. Only code-running flags and Berth's own were
refused, so `--chat-template /etc/passwd` (or the state dir's signing key) was accepted, vLLM rendered the file
as the prompt template and `/detokenize` handed it back; `--tokenizer`, `--download-dir`, `--ssl-keyfile`,
`--allowed-local-media-path /`, `--hf-overrides` and `--speculative-config` went through the same way.

Now ExtraArgs is an allow-list read from vLLM's own parser (catalog/engine_flags.json): every word must be a flag
vLLM knows, read as vLLM reads it, with a value of its type; JSON flags and free text are refused; a path must be
relative and stay inside the copy's model directory, where the node resolves it. Refused at submission (catalog,
API and CLI) in one line; the checks here need no stack."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from activities.vllm_command import vllm_serve_args
from berth.errors import UserInputError
from catalog.definition import EngineSpec
from catalog.engine_args import TABLE_PATH, flag_table
from catalog.entry import find_entry
from catalog.extra_args import engine_args_refusal, in_model_dir
from catalog.render import render, resolve_values
from tests.catalog.conftest import CatalogApi, catalog_api  # noqa: F401  (the in-process API fixture)
from workflows.payloads import RankSpec

REPO = Path(__file__).resolve().parents[2]
ENTRY = "GPT-OSS 20B"
SIGNING_KEY = "/var/lib/berth/state/keys/signing.pem"
PATH_RULE = "a path in ExtraArgs is relative to the model's directory and stays inside it"


def _refusal(extra_args: str) -> str:
    entry = find_entry(ENTRY)
    with pytest.raises(UserInputError) as caught:
        render(entry, resolve_values(entry, {"ExtraArgs": extra_args}))
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def _passes(extra_args: str) -> tuple[str, ...]:
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, {"ExtraArgs": extra_args}))
    assert definition.replica is not None
    return definition.replica.engine.extra_args


# The review's examples: each was accepted at submission before.
@pytest.mark.parametrize(("extra_args", "expected"), [
    ("--chat-template /etc/passwd", f"ExtraArgs may not give --chat-template the path '/etc/passwd': {PATH_RULE}"),
    (f"--chat-template {SIGNING_KEY}", f"ExtraArgs may not give --chat-template the path '{SIGNING_KEY}'"),
    (f"--ssl-keyfile {SIGNING_KEY}", f"ExtraArgs may not give --ssl-keyfile the path '{SIGNING_KEY}'"),
    ("--tokenizer /etc", "ExtraArgs may not give --tokenizer the path '/etc'"),
    ("--download-dir /tmp/weights", "ExtraArgs may not give --download-dir the path '/tmp/weights'"),
    ("--generation-config /tmp", "ExtraArgs may not give --generation-config the path '/tmp'"),
    ("--allowed-local-media-path /", "ExtraArgs may not give --allowed-local-media-path the path '/'"),
    ("--hf-overrides '{\"auto_map\": {\"AutoConfig\": \"evil.Config\"}}'",
     "ExtraArgs may not set --hf-overrides: it takes JSON, and it rewrites the model's configuration"),
    ("--speculative-config '{\"model\": \"/tmp/draft\", \"num_speculative_tokens\": 2}'",
     "ExtraArgs may not set --speculative-config: it takes JSON"),
])
def test_the_reviews_examples_are_refused_in_one_line(extra_args: str, expected: str) -> None:
    assert _refusal(extra_args).startswith(expected)


# The same, spelled every way vLLM's parser reads: underscores, `=`, abbreviations, `..`, dotted JSON keys.
@pytest.mark.parametrize(("extra_args", "expected"), [
    ("--chat_template=/etc/passwd", "ExtraArgs may not give --chat_template (vLLM reads it as --chat-template) "
                                    "the path '/etc/passwd'"),
    ("--chat-template ../../keys/signing.pem", "ExtraArgs may not give --chat-template the path '../../keys/"),
    ("--chat-template templates/../../../etc/passwd", "ExtraArgs may not give --chat-template the path"),
    ("--chat-template ~/x.jinja", "ExtraArgs may not give --chat-template the path '~/x.jinja'"),
    ("--download /tmp", "ExtraArgs may not give --download (vLLM reads it as --download-dir) the path '/tmp'"),
    ("--generation-c=/tmp", "ExtraArgs may not give --generation-c (vLLM reads it as --generation-config)"),
    ("--allowed_local /", "ExtraArgs may not give --allowed_local (vLLM reads it as --allowed-local-media-path)"),
    ("--chat-templ /etc/passwd", "ExtraArgs flag --chat-templ is ambiguous: vLLM could read it as --chat-template, "
                                 "--chat-template-content-format. Write the flag in full."),
    ("--hf-over '{}'", "ExtraArgs may not set --hf-over (vLLM reads it as --hf-overrides): it takes JSON"),
    ("--hf-overrides.auto_map.AutoConfig evil.Config",
     "ExtraArgs may not set --hf-overrides.auto_map.AutoConfig (vLLM reads it as --hf-overrides): it takes JSON"),
    ("-sc.model /tmp/draft", "ExtraArgs may not set -sc.model (vLLM reads it as -sc): it takes JSON"),
    ("--kv-transfer-config '{\"kv_connector_module_path\": \"evil\"}'", "ExtraArgs may not set --kv-transfer-config"),
    ("--compilation-config.debug_dump_path /tmp", "ExtraArgs may not set --compilation-config.debug_dump_path"),
    ("--model-loader-extra-config '{}'", "ExtraArgs may not set --model-loader-extra-config: it takes JSON"),
    ("--lora-modules a=/tmp/adapter", "ExtraArgs may not set --lora-modules: it loads adapters"),
    ("--log-config-file /tmp/log.json", "ExtraArgs may not set --log-config-file: a logging configuration file"),
    ("--tool-server 10.0.0.1:8000", "ExtraArgs may not set --tool-server: it has the engine call servers"),
    ("--otlp-traces-endpoint http://evil:4317", "ExtraArgs may not set --otlp-traces-endpoint"),
    ("--hf-token hf_x", "ExtraArgs may not set --hf-token: it puts a credential on the command line"),
    ("--trust-request-chat-template", "ExtraArgs may not set --trust-request-chat-template"),
    ("--enable-prompt-embeds", "ExtraArgs may not set --enable-prompt-embeds: it has the engine unpickle tensors"),
    ("--device-ids 0,1,2,3", "ExtraArgs may not set --device-ids: Berth assigns each rank its GPUs"),
    ("--load-format tensorizer", "ExtraArgs may not give --load-format 'tensorizer'"),
    ("--spec-method custom_class", "ExtraArgs may not give --spec-method 'custom_class'"),
    ("--scheduler-cls evil.Scheduler", "ExtraArgs may not set --scheduler-cls: it imports a class"),
    ("--mm-encoder-fp8-scale-save-path scales.json", "ExtraArgs may not set --mm-encoder-fp8-scale-save-path"),
    ("--response-role bot --cohere-format x", "ExtraArgs may not set --cohere-format: it takes free text"),
    ("--help", "ExtraArgs may not set --help"),
])
def test_every_spelling_of_a_refused_flag_is_refused(extra_args: str, expected: str) -> None:
    assert _refusal(extra_args).startswith(expected)


@pytest.mark.parametrize(("extra_args", "expected"), [
    ("--max-num-seqs four", "ExtraArgs --max-num-seqs takes a whole number, not 'four'."),
    ("--max-num-seqs=1.5", "ExtraArgs --max-num-seqs takes a whole number, not '1.5'."),
    ("--cpu-offload-gb nan", "ExtraArgs --cpu-offload-gb takes a finite number, not 'nan'."),
    ("--dtype fp64", "ExtraArgs --dtype takes one of auto, bfloat16, float, float16, float32, half; not 'fp64'."),
    ("--max-lora-rank 9", "ExtraArgs --max-lora-rank takes one of 1, 8, 16"),
    ("--tool-call-parser nope", "ExtraArgs --tool-call-parser takes one of "),
    ("-q nope", "ExtraArgs -q takes one of "),
    ("-O9", "ExtraArgs -O9 (vLLM reads it as --optimization-level) takes one of 0, 1, 2, 3; not '9'."),
    ("-O fast", "ExtraArgs -O needs a level: write -O0, -O1, -O2 or -O3."),
    ("--enforce-eager=true", "ExtraArgs --enforce-eager is a switch and takes no value: write --enforce-eager or "
                             "--no-enforce-eager."),
    ("--seed", "ExtraArgs --seed needs a value: write --seed VALUE."),
    ("--seed --enforce-eager", "ExtraArgs --seed needs a value"),
    ("--default-chat-template-kwargs not-json", "ExtraArgs --default-chat-template-kwargs takes a JSON object"),
    ("--allowed-origins '{\"a\": 1}'", "ExtraArgs --allowed-origins takes a JSON list of strings"),
    ("--max-num-seqs.x 1", "ExtraArgs --max-num-seqs.x (vLLM reads it as --max-num-seqs) sets a JSON key, but "
                           "--max-num-seqs takes no JSON"),
])
def test_values_are_checked_against_the_flags_type(extra_args: str, expected: str) -> None:
    assert _refusal(extra_args).startswith(expected)


@pytest.mark.parametrize(("extra_args", "expected"), [
    ("--no-such-flag", "ExtraArgs has no vLLM flag --no-such-flag: check its spelling; see docs/catalog.md "
                       "\"ExtraArgs\" for the flags it takes."),
    ("--Enforce-Eager", "ExtraArgs has no vLLM flag --Enforce-Eager"),
    ("-x", "ExtraArgs has no vLLM flag -x"),
    ("--enable-p", "ExtraArgs flag --enable-p is ambiguous: vLLM could read it as"),
    ("--max-num 4", "ExtraArgs flag --max-num is ambiguous"),
    ("/etc/passwd", "ExtraArgs word '/etc/passwd' is neither a vLLM flag nor the value of one"),
    ("--enforce-eager stray", "ExtraArgs word 'stray' is neither a vLLM flag nor the value of one"),
    ("--", "ExtraArgs may not contain a bare `--`"),
])
def test_unknown_flags_and_stray_words_are_refused(extra_args: str, expected: str) -> None:
    assert _refusal(extra_args).startswith(expected)


@pytest.mark.parametrize("extra_args", [
    "--tool-call-parser openai --enable-auto-tool-choice",  # the suite's and the docs' own examples
    "--enable-auto-tool-choice --tool-call-parser hermes",
    "--max-num-seqs 4",
    "--fail-share 0.5",  # the simulator's canary flag (tests/simulator/test_simulator_fail_share.py)
    "--tool-call-parser openai --enable-auto-tool-choice --model-impl vllm --config-format hf --max-num-seqs 4 "
    "-q awq -O3 --seed=0",
    "--enforce-eager --no-enable-prefix-caching --max_num_batched_tokens=8k --dtype half --seed -1",
    "--enforce --no-enable-prefix --max-num-se 4",  # abbreviations argparse reads as one flag each
    "-qawq -O 2 --reasoning-parser deepseek_r1 --attention-backend triton_attn --moe-backend Triton",
    "--cudagraph-capture-sizes 1 2 4 8 --collect-detailed-traces model --uvicorn-log-level warning",
    "--chat-template chat_template.jinja --generation-config vllm --tokenizer . --download-dir weights",
    "--chat-template templates/../chat.jinja --allowed-local-media-path media --generation-config=auto",
    "--default-chat-template-kwargs '{\"enable_thinking\": false}' "
    "--override-generation-config '{\"temperature\": 0.6}'",
    "--default-chat-template-kwargs.enable_thinking false --limit-mm-per-prompt.image 0",
    "--allowed-origins '[\"https://app.example\"]' --response-role assistant --allowed-media-domains example.com",
    "--spec-method ngram --spec-tokens 4 --load-format safetensors",
])
def test_allowed_flags_pass_and_are_kept_as_written(extra_args: str) -> None:
    assert _passes(extra_args) == tuple(shlex.split(extra_args))


@pytest.mark.parametrize("extra_args", ["--trust-remote-code", "--trust-remote-code=true", "--trust-remote",
                                        "--tool-parser-plugin=/tmp/plugin.py", "--middleware evil.App"])
def test_code_flags_are_left_to_the_administrators_setting(extra_args: str) -> None:
    """The allow-list leaves them to the submission, which refuses them with their own message (and takes them
    only where BERTH_ALLOW_TRUST_REMOTE_CODE is set): tests/security/test_rank_environment.py."""
    assert engine_args_refusal(shlex.split(extra_args)) is None


def test_a_path_is_the_model_directorys_on_the_node() -> None:
    """vLLM resolves a relative path against the rank's working directory (its run dir under the state dir):
    the node makes each path the check let through an absolute one inside the copy's model directory."""
    words = ["--enforce-eager", "--chat-template", "templates/../chat.jinja", "--tokenizer=.",
             "--generation-config", "vllm", "--download_dir=weights"]
    assert in_model_dir(words, "/vol/model") == [
        "--enforce-eager", "--chat-template", "/vol/model/chat.jinja", "--tokenizer=/vol/model",
        "--generation-config", "vllm", "--download_dir=/vol/model/weights"]
    spec = RankSpec(workflow_id="wf", copy_id="wf.copy-0", rank=0, nnodes=1, gpus_per_node=1, gpus=(0,),
                    host="127.0.0.1", port=20001, master_addr="127.0.0.1", master_port=20002,
                    model_dir="/vol/model", log_name="vllm-rank-0",
                    engine=EngineSpec(served_model_name="org/model", max_model_len=4096,
                                      extra_args=("--chat-template", "chat_template.jinja")))
    assert vllm_serve_args(spec)[-2:] == ["--chat-template", "/vol/model/chat_template.jinja"]


def test_the_api_and_the_cli_refuse_at_submission(catalog_api: CatalogApi, tmp_path: Path) -> None:  # noqa: F811
    catalog_api.add_node("node-a", [80, 80, 80, 80])
    for extra_args in ("--chat-template /etc/passwd", "--hf-overrides '{}'", "--max-num-seqs four", "--no-such"):
        response = catalog_api.start(ENTRY, {"ExtraArgs": extra_args})
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
        assert detail.startswith("ExtraArgs ") and "\n" not in detail
    assert catalog_api.context.store.workflows() == []
    # Every check passed; only Temporal (unreachable here) stands between it and a workflow.
    allowed = catalog_api.start(ENTRY, {"ExtraArgs": "--chat-template chat_template.jinja --max-num-seqs 8"})
    assert allowed.status_code == 503 and "Temporal" in allowed.json()["detail"]
    env = dict(os.environ, BERTH_API_URL=catalog_api.base_url, BERTH_TOKEN=catalog_api.token,
               BERTH_CONFIG=str(tmp_path / "client.json"), COLUMNS="200", PYTHONPATH=str(REPO))
    cli = subprocess.run([sys.executable, "-m", "cli", "workflow", "catalog", "start", ENTRY, "--values",
                          "ExtraArgs='--chat-template /etc/passwd'"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    lines = cli.stderr.strip().splitlines()
    assert cli.returncode != 0 and len(lines) == 1, cli.stderr
    assert "ExtraArgs may not give --chat-template the path '/etc/passwd'" in lines[0]


def _vllm_python() -> Path:
    """The vLLM virtualenv `make test` installs (mk/engines.mk), or the one BERTH_VLLM_BIN points into."""
    override = os.environ.get("BERTH_VLLM_BIN")
    return Path(override).parent / "python" if override else REPO / ".venv-vllm" / "bin" / "python"


def test_the_table_is_what_the_installed_vllm_parser_says(tmp_path: Path) -> None:
    generated = tmp_path / "engine_flags.json"
    run = subprocess.run([str(_vllm_python()), str(REPO / "catalog" / "generate_engine_flags.py"), str(generated)],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert generated.read_text() == TABLE_PATH.read_text(), (
        "catalog/engine_flags.json is stale: run .venv-vllm/bin/python catalog/generate_engine_flags.py")
    assert json.loads(generated.read_text())["vllm"] == flag_table().vllm
