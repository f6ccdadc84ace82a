"""Image: the container image an entry may name, and what it needs of the cluster (a container runtime).

This Berth version runs every engine and service bare-metal on its nodes, so a non-default Image is
refused at submission whatever `container_runtime` says: a parameter accepted and then ignored would
run something other than what was asked for."""

from __future__ import annotations

from typing import Any

from berth.errors import UserInputError, shown
from catalog.entry import Entry

RUNTIME_SETTING = "BERTH_CONTAINER_RUNTIME"


def refuse_image(entry: Entry, values: dict[str, Any], runtime: str) -> None:
    """Refuse an Image other than the entry's default, saying why it cannot run here."""
    if not any(parameter.name == "Image" for parameter in entry.parameters):
        return
    image = values.get("Image")
    if not image or image == entry.parameter("Image").default:
        return
    if not runtime:
        raise UserInputError(f"Image={shown(image)} needs a container runtime; this cluster runs engines "
                             "bare-metal (no container_runtime configured). Leave Image empty.")
    raise UserInputError(f"Image={shown(image)}: container runtime {shown(runtime)} is not supported by this "
                         f"Berth version, which runs engines bare-metal. Leave Image empty (and unset "
                         f"{RUNTIME_SETTING}).")
