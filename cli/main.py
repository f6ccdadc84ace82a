"""The `berth` command (pyproject's `[project.scripts]`, `python -m cli`): a command line that a fast path
answers (cli/fast/, without Typer, Rich, pydantic or httpx) is answered there, and every other by the Typer app
(cli/app.py). Its imports are every command's start, hence none at the top (issue 33)."""

from __future__ import annotations

import sys


def main() -> None:
    from cli.fast import answer

    code = answer(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from cli.app import run

    run()
