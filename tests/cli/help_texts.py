"""Every `berth` command's `--help`, as `python -P -m cli PATH --help` prints it at COLUMNS=120.

Run as a module (`python -P -m tests.cli.help_texts`) with PYTHONPATH naming a checkout: it walks that
checkout's command tree and prints one JSON object, command path → help text. It renders in one process
rather than one per command (60-odd interpreters on a shared machine); the test checks that this rendering
is what a real `python -m cli … --help` prints for a sample of commands.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import typer
from typer.core import TyperGroup

PROGRAM = "python -m cli"  # what click names the program when it runs as `python -m cli`


def command_paths(group: TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under `group`, in the order its help lists them, `group` itself first."""
    paths = [prefix]
    context = typer.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, TyperGroup):
            paths += command_paths(command, (*prefix, name))
        elif command is not None:
            paths.append((*prefix, name))
    return paths


def render_help(command: TyperGroup, path: tuple[str, ...]) -> str:
    """What `python -m cli *path --help` writes on standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        command.main(args=[*path, "--help"], prog_name=PROGRAM, standalone_mode=True)
    return out.getvalue()


def key(path: tuple[str, ...]) -> str:
    return " ".join(("berth", *path))


def all_help() -> dict[str, str]:
    from cli.app import app

    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    return {key(path): render_help(command, path) for path in command_paths(command)}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(all_help(), indent=1, ensure_ascii=False) + "\n")
