"""`make demo`: bring up the embedded stack in a temporary state dir, serve a model from the catalog,
talk to it through its Berth endpoint with the OpenAI SDK (plain and streamed), then stop everything."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stack.driver import free_port_base  # noqa: E402 — reuse the free-port finder


def berth(*args: str, env: dict[str, str], capture: bool = False) -> str:
    print(f"$ berth {' '.join(args)}", flush=True)
    # -P and PYTHONPATH: this checkout's Berth, chosen explicitly, for `berth` and every component it starts
    # (they never import from the working directory).
    result = subprocess.run([sys.executable, "-P", "-m", "cli", *args], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE if capture else None)
    if result.returncode != 0:
        raise SystemExit(f"demo: `berth {' '.join(args)}` failed with status {result.returncode}")
    return result.stdout or ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--simulate", action="store_true", help="simulated GPUs and the engine simulator")
    parser.add_argument("--keep", action="store_true", help="leave the stack running at the end")
    parser.add_argument("--hf-mirror", type=Path, default=REPO / ".state" / "hf-mirrors",
                        help="local Hugging Face mirror holding SmolLM2 (make smollm2)")
    options = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="berth-demo-"))
    env = dict(os.environ, BERTH_CONFIG=str(state / "client-config.json"),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    up = ["up", "--detach", "--state-dir", str(state / "state"), "--port-base", str(free_port_base())]
    if options.simulate:
        entry, values, model = "GPT-OSS 20B", "", "openai/gpt-oss-20b"
        up += ["--simulate-gpus", "4x80GB"]
    else:
        if not (options.hf_mirror / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct").exists():
            raise SystemExit(f"demo: no SmolLM2 in {options.hf_mirror}; run `make smollm2` (make demo does).")
        entry, values, model = "SmolLM2 135M Instruct", "", "HuggingFaceTB/SmolLM2-135M-Instruct"
        up += ["--hf-mirror", str(options.hf_mirror.resolve())]
    berth(*up, env=env)
    try:
        start = ["workflow", "catalog", "start", entry] + (["--values", values] if values else [])
        workflow_id = berth(*start, env=env, capture=True).splitlines()[0].strip()
        print(f"workflow {workflow_id}")
        berth("workflow", "watch", workflow_id, env=env)
        endpoints = json.loads(berth("endpoint", "list", "-o", "json", env=env, capture=True))
        endpoint = next(e for e in endpoints if e["workflow_id"] == workflow_id)
        token = berth("endpoint", "generate-token", endpoint["id"], "--expiration", "1h", env=env, capture=True).strip()
        import openai

        client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=token, max_retries=0)
        question = [{"role": "user", "content": "What is the capital of France? Answer in one short English sentence."}]
        print(f"\nOpenAI SDK → {endpoint['url']}/v1 (model {model})")
        reply = client.chat.completions.create(model=model, messages=question, max_tokens=48, temperature=0)
        print(f"  chat:     {reply.choices[0].message.content!r}")
        print("  streamed: ", end="", flush=True)
        for chunk in client.chat.completions.create(model=model, messages=question, max_tokens=48, temperature=0,
                                                    stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                print(chunk.choices[0].delta.content, end="", flush=True)
        print("\n")
        if not options.keep:
            berth("workflow", "stop", workflow_id, env=env)
    finally:
        if not options.keep:
            berth("down", "--state-dir", str(state / "state"), env=env)


if __name__ == "__main__":
    main()
