"""Compile the endpoint proxy's hot path with mypyc into .build/compiled (`make compiled`).

The endpoint proxy spends most of its CPU in the interpreter running its own pipeline (docs/performance.md,
"A compiled hot path"); mypyc turns these typed modules into C extensions, as black and mypy ship themselves.
The extensions are built beside the tree, never into it: a `.so` next to its `.py` would be imported instead
of the source even after the source changed. berth/compiled.py loads them only while every source they were
built from is unchanged (the manifest's digest), and otherwise leaves the interpreter to run the sources.

Usage: python scripts/compile_hot_path.py [--out .build/compiled]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from berth.compiled import MANIFEST, source_digest  # noqa: E402  (the checkout's ground floor, found above)

# What a proxied request runs, module by module. Left out: the endpoint's process entry (run.py) and what runs
# off the per-request path (LiteLLM keys and replay, model cards, Redis counters, scrape reports), and what mypyc
# does not compile: async generators and built-in exceptions' subclasses (asgi.py, upstream_stream.py). The load
# report is compiled: its counts are bumped by every request.
ENDPOINT_OFF_PATH = {"run", "redis_counters", "litellm_keys", "litellm_replay", "model_cards", "scrape_report"}
EDGE_ON_PATH = ["capacity_policies", "credentials", "exchange", "light_series", "openai_routes", "policy_kit",
                "prefix_affinity", "proxy_metrics", "proxy_tracing", "replica", "routing", "site_local", "upstream",
                "upstream_connection"]

# The HTTP/1.1 protocol under every request of every Berth server (uvicorn's own ran interpreted).
SERVER_ON_PATH = ["berth/http_cycle.py", "berth/http_connection.py"]


def hot_path_sources() -> list[str]:
    endpoint = sorted(p for p in (ROOT / "gateway/endpoint").glob("*.py")
                      if p.stem != "__init__" and p.stem not in ENDPOINT_OFF_PATH)
    steps = sorted(p for p in (ROOT / "gateway/endpoint/steps").glob("*.py") if p.stem != "__init__")
    edge = [ROOT / "gateway/edge" / f"{name}.py" for name in EDGE_ON_PATH]
    server = [ROOT / name for name in SERVER_ON_PATH]
    return [str(p.relative_to(ROOT)) for p in [*endpoint, *steps, *edge, *server]]


def build(out: Path) -> dict[str, object]:
    from mypyc.build import mypycify
    from setuptools import setup

    sources = hot_path_sources()
    started = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    lib, temp = out / "lib", out / "temp"
    os.chdir(ROOT)  # mypyc names modules by their path from here
    extensions = mypycify(sources, opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"), target_dir=str(temp / "c"),
                          multi_file=True)
    setup(name="berth-hot-path", ext_modules=extensions, script_args=[
        "-q", "build_ext", "--build-lib", str(lib), "--build-temp", str(temp), "--parallel", str(os.cpu_count() or 1)])
    shutil.rmtree(temp, ignore_errors=True)
    modules = {}
    for so in lib.rglob("*.so"):
        name = ".".join(so.relative_to(lib).parts)[: -len("".join(so.suffixes))]
        modules[name] = str(so.relative_to(out))
    manifest = {"modules": modules, "sources": sources, "digest": source_digest(ROOT),
                "python": sys.implementation.cache_tag, "seconds": round(time.monotonic() - started, 1)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".build" / "compiled")
    manifest = build(parser.parse_args().out.resolve())
    print(f"compiled {len(manifest['sources'])} modules in {manifest['seconds']} s")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
