"""No Docker engine runs here: check that docker-compose.yml and the Dockerfile name only things
that exist (CLI commands, files, build contexts)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from typer.main import get_command

from cli.app import app

REPO = Path(__file__).resolve().parent.parent


def test_every_service_command_exists() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    commands = get_command(app).commands  # type: ignore[attr-defined]
    expected = {"postgres", "temporal", "temporal-ui", "api", "worker", "proxy", "node"}
    assert expected <= set(compose["services"])
    for name, service in compose["services"].items():
        if "build" not in service:
            assert ":" in service["image"], f"{name} pins no image tag"
            continue
        assert (REPO / service["build"] / "Dockerfile").exists()
        assert service["command"][0] in commands, f"{name}: `berth {service['command'][0]}` does not exist"
        for dependency in service.get("depends_on", []):
            assert dependency in compose["services"]
    for key in ("BERTH_STATE_DIR", "BERTH_TEMPORAL_ADDRESS", "BERTH_API_URL", "BERTH_TOKEN"):
        assert key in compose["services"]["worker"]["environment"]


def test_dockerfile_copies_existing_paths() -> None:
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), f"Dockerfile copies missing {source}"


def test_temporal_and_its_ui_are_not_published() -> None:
    """Whoever reaches Temporal can start, terminate and poll: it stays on the compose network."""
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("temporal", "temporal-ui", "postgres"):
        assert not services[name].get("ports"), f"{name} publishes {services[name]['ports']}"
    published = {part for service in services.values() for port in service.get("ports", [])
                 for part in str(port).split(":")}
    assert not published & {"7233", "8233", "8080"}, published


def test_dockerfile_copies_every_package() -> None:
    """The image installs the packages pyproject names; one left out (the console once) breaks it at import."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {line.split()[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")}
    assert {name.rstrip("*") for name in packages} <= copied
