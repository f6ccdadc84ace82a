"""A submission's site values (issue 36) checked against what they meet: a registered model's residency, copied
to the workflow's Residency (a Residency outside it refused in one line), and a Slurm cluster, where Berth's
node agents do not place copies and site values would be ignored (refused instead)."""

from __future__ import annotations

from typing import Any

from berth.contracts import ModelRecord
from berth.errors import UserInputError
from berth.sites import within_residency
from catalog.definition import WorkflowDefinition
from catalog.entry import Entry


def with_model_residency(entry: Entry, values: dict[str, Any], model: ModelRecord | None) -> dict[str, Any]:
    """The values with the registered model's residency as their Residency: where the registry says the model's
    bytes may be, its copies are placed and routed only. A narrower Residency (a site or region within it) stands;
    another is refused."""
    if model is None or not model.residency or all(p.name != "Residency" for p in entry.parameters):
        return values
    given = values.get("Residency")
    if given is None or given == "":
        return {**values, "Residency": model.residency}
    if isinstance(given, str) and not within_residency(given, model.residency):
        raise UserInputError(f"Residency={given[:64]} contradicts model {model.name}'s residency "
                             f"{model.residency}: leave Residency empty, or name {model.residency} or a region "
                             f"within it ({model.residency}-…).")
    return values  # within it; a value that is no string is refused by the values' own check


def refuse_sites_on_slurm(definition: WorkflowDefinition) -> None:
    """Where Slurm places copies, a site rule would be silently ignored: refuse it instead."""
    if definition.replica is not None and definition.replica.sites is not None:
        raise UserInputError("PreferredSite, AllowedSites, Residency, FailoverSites, MaxCopiesPerSite and MinSites "
                             "apply where Berth's node agents place copies; this cluster's copies are Slurm jobs: "
                             "leave them empty.")
