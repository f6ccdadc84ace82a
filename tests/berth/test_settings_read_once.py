"""berth/settings/ is the only place a BERTH_* variable is read (precedence is defined once): a read
anywhere else in the product fails here. Writing one into a child's environment is fine. The one other place is
the CLI's client configuration, berth/client_config.py: outside the package because `berth workflow list`'s fast
path must not import pydantic, which berth/settings/__init__.py does (issue 33); berth.settings re-reads nothing
of it (ClientConfig.load validates what berth/client_config.py read)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("activities", "berth", "catalog", "cli", "control", "gateway", "node", "server", "stack", "workflows")
READ = re.compile(r"""(getenv\(\s*|environ\.get\(\s*|environ\[\s*)["']BERTH_[A-Z0-9_]+["']\s*(?!\]\s*=[^=])""")


def test_no_room_reads_a_berth_variable_but_settings() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for room in ROOMS for path in sorted((REPO / room).rglob("*.py"))
             if path.parent != REPO / "berth" / "settings" and path != REPO / "berth" / "client_config.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if READ.search(line)]
    assert not found, "\n".join(found)


def test_the_pattern_tells_a_read_from_a_write() -> None:
    assert READ.search('x = os.environ.get("BERTH_TOKEN", "")')
    assert READ.search('x = os.environ["BERTH_TOKEN"]')
    assert not READ.search('os.environ["BERTH_TOKEN"] = token')


def test_repo_root_is_the_checkout() -> None:
    """settings is a package now: the checkout is two folders above its __init__.py, not one."""
    from berth.settings import repo_root

    assert repo_root() == REPO and (repo_root() / "pyproject.toml").is_file()
