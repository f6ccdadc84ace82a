"""The hot path compiled (berth/compiled.py, scripts/compile_hot_path.py): the suite runs it compiled, as the
endpoint proxy does; a build is loaded only while it matches every source, else nothing of it is; and the compiled
modules keep the rule that mypyc needs of them (no await inside an `except` or `finally` block)."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from berth import compiled

ROOT = Path(__file__).resolve().parents[2]
# A fresh interpreter installs the build named by its first argument, and prints the line.
INSTALL = "import sys; from pathlib import Path; from berth import compiled; print(compiled.install(Path(sys.argv[1])))"


def _build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compile_hot_path", ROOT / "scripts" / "compile_hot_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_runs_the_hot_path_compiled() -> None:
    """`make test` builds it first (mk/compiled.mk); a run without a current build says so here, in one line."""
    import gateway.edge.routing
    import gateway.endpoint.endpoint_proxy
    import gateway.endpoint.pipeline

    assert compiled.status().startswith("compiled: "), f"{compiled.status()}: run `make compiled`"
    for module in (gateway.endpoint.endpoint_proxy, gateway.endpoint.pipeline, gateway.edge.routing):
        assert compiled.is_compiled(module), module.__name__
    manifest = json.loads((compiled.BUILD / compiled.MANIFEST).read_text())
    assert sorted(manifest["sources"]) == sorted(_build_script().hot_path_sources())


def test_no_await_inside_an_except_or_finally_block_of_a_compiled_module() -> None:
    """mypyc keeps no exception state per coroutine: one suspended in a handler leaves its exception as every
    other task's current one (a refusal answered there came out as a 500)."""
    found = []
    for source in _build_script().hot_path_sources():
        for node in ast.walk(ast.parse((ROOT / source).read_text())):
            if not isinstance(node, ast.Try | ast.TryStar):
                continue
            for block in [*node.handlers, *node.finalbody]:
                found += [f"{source}:{sub.lineno}" for sub in ast.walk(block)
                          if isinstance(sub, ast.Await | ast.AsyncFor | ast.AsyncWith)]
    assert not found, found


def _copy_of_build(tmp_path: Path, **changes: str) -> Path:
    build = tmp_path / "compiled"
    shutil.copytree(compiled.BUILD, build)
    manifest = json.loads((build / compiled.MANIFEST).read_text())
    (build / compiled.MANIFEST).write_text(json.dumps(manifest | changes))
    return build


@pytest.mark.parametrize(("changes", "line"), [
    ({"digest": "0" * 64}, "interpreted: a source changed since the build (`make compiled` builds it again)"),
    ({"python": "cpython-399"}, f"interpreted: the build is for cpython-399, this is {sys.implementation.cache_tag}"),
])
def test_a_build_that_no_longer_matches_is_not_loaded(tmp_path: Path, changes: dict[str, str], line: str) -> None:
    """In a fresh interpreter: the line says why, and every hot-path module is the interpreted source."""
    build = _copy_of_build(tmp_path, **changes)
    script = (f"{INSTALL}; import gateway.endpoint.pipeline as p; print(compiled.is_compiled(p), p.__file__)")
    out = subprocess.run([sys.executable, "-c", script, str(build)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert out[0] == line
    assert out[1] == f"False {ROOT / 'gateway/endpoint/pipeline.py'}"


def test_a_current_build_is_loaded_whole_and_a_missing_one_is_said(tmp_path: Path) -> None:
    script = (f"{INSTALL}; import gateway.endpoint.pipeline as p, gateway.edge.replica as r;"
              "print(compiled.is_compiled(p), compiled.is_compiled(r))")
    current = _copy_of_build(tmp_path)
    out = subprocess.run([sys.executable, "-c", script, str(current)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert out[0].startswith("compiled: ") and out[0].endswith(f"modules from {current}")
    assert out[1] == "True True"
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "none")], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert out == ["interpreted: no compiled build (`make compiled` builds one)", "False False"]


def test_a_module_imported_before_the_build_keeps_the_whole_hot_path_interpreted(tmp_path: Path) -> None:
    """All or nothing: a compiled module calls the other compiled ones directly, so none mixes with a source."""
    script = ("import sys; from pathlib import Path; import gateway.edge.replica; from berth import compiled;"
              "print(compiled.install(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", script, str(_copy_of_build(tmp_path))], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert out == "interpreted: gateway.edge.replica was imported before the compiled build was installed"
