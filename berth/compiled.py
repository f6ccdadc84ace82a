"""The endpoint proxy's hot path as C extensions (mypyc, `make compiled`), loaded only while they match the sources.

`scripts/compile_hot_path.py` builds the extensions into .build/compiled beside the tree, never into it, and
records one digest of every source of the packages they were built from (berth/ and gateway/): a typed module's
compiled code calls the other compiled modules directly and trusts what it read of the rest at build time. `install`
puts a finder first on the import path that loads those extensions only while that digest still holds; after any
source changed, or where nothing was built, it installs nothing and the interpreter runs the sources, as before.
It is all or nothing for the same reason: a compiled module would call the compiled copy of one edited since.

One rule binds the compiled modules (tests/berth/test_compiled.py holds them to it): no `await` inside an `except`
or `finally` block. A compiled coroutine suspended there leaves the exception it handles as the thread's current
one while other tasks run (mypyc keeps no per-coroutine exception state, as CPython's frames do), and a refusal
answered there came out as the wrong exception, a 500. So the handler notes what happened, and the await follows it.

The processes that run the hot path call `install` before they import it: `berth proxy` and `berth gateway`
(cli/components.py), the suite (tests/__init__.py) and the benchmarks (bench/__init__.py), so the suite tests
the code as the proxy runs it. Standard library only."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / ".build" / "compiled"
MANIFEST = "manifest.json"
# The packages whose sources a build is bound to: the compiled modules and everything of Berth they import.
PACKAGES = ("berth", "gateway")

# The line of a build that no longer matches: a warning where a build was expected, not a fresh checkout's news.
STALE = "interpreted: a source changed since the build (`make compiled` builds it again)"

_status: str | None = None


def source_digest(root: Path = ROOT) -> str:
    """One sha256 over the path and bytes of every Python source in PACKAGES (~160 files: a few ms)."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class CompiledFinder:
    """A meta-path finder for the modules of one build: each name maps to its extension under the build."""

    def __init__(self, build: Path, modules: dict[str, str]) -> None:
        self.build = build
        self.modules = modules

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        relative = self.modules.get(fullname)
        if relative is None:
            return None
        location = str(self.build / relative)
        loader = importlib.machinery.ExtensionFileLoader(fullname, location)
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)

    def invalidate_caches(self) -> None:
        """Nothing cached: importlib.invalidate_caches() calls this on every finder."""


def _refusal(build: Path) -> str | tuple[Path, dict[str, str]]:
    """Why this build cannot be loaded here (a line), or where it is and what it holds."""
    try:
        manifest = json.loads((build / MANIFEST).read_text())
    except FileNotFoundError:
        return "interpreted: no compiled build (`make compiled` builds one)"
    except ValueError:
        return f"interpreted: {build / MANIFEST} is not JSON (run `make compiled` again)"
    if manifest.get("python") != sys.implementation.cache_tag:
        return f"interpreted: the build is for {manifest.get('python')}, this is {sys.implementation.cache_tag}"
    if manifest.get("digest") != source_digest(ROOT):
        return STALE
    modules: dict[str, str] = manifest.get("modules") or {}
    early = sorted(name for name in modules if name in sys.modules)
    if early:
        return f"interpreted: {early[0]} was imported before the compiled build was installed"
    return build, modules


def install(build: Path = BUILD) -> str:
    """Load the compiled hot path from now on where it matches the sources; a line saying which ran and why.
    Idempotent: a second call answers the first call's line."""
    global _status
    if _status is not None:
        return _status
    found = _refusal(build)
    if isinstance(found, str):
        _status = found
    else:
        where, modules = found
        sys.meta_path.insert(0, CompiledFinder(where, modules))  # type: ignore[arg-type]
        _status = f"compiled: {sum(1 for name in modules if '__mypyc' not in name)} modules from {where}"
    return _status


def status() -> str:
    """The line `install` answered, or that it was never called."""
    return _status or "interpreted: the compiled build was never installed in this process"


def is_compiled(module: ModuleType) -> bool:
    """Whether this module runs as a C extension."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)
