"""docs/karpenter-compatibility.md names every field the API models accept, and every well-known label.

The models are walked recursively by alias (the camelCase name a manifest uses); a field added to a model
without its row on the page, a row for a field no model accepts, or a status word outside the page's legend
fails here.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, create_model

from nodesmith.core.api import EC2NodeClass, NodeClaim, NodePool
from nodesmith.core.api.common import WELL_KNOWN_LABELS
from nodesmith.core.api.nodeclaim import NodeClaimStatus
from nodesmith.core.disruption.drift_basis import (
    NODECLASS_HASH_ANNOTATION,
    NODECLASS_HASH_VERSION_ANNOTATION,
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
)
from nodesmith.core.disruption.repair import DO_NOT_REPAIR_ANNOTATION
from nodesmith.core.do_not_disrupt import DO_NOT_DISRUPT_ANNOTATION
from nodesmith.core.termination import TERMINATION_TIMESTAMP_ANNOTATION

PAGE = Path(__file__).resolve().parents[2] / "docs" / "karpenter-compatibility.md"
STATUSES = {"supported", "partial", "ignored", "refused", "written", "not written"}
_CODE = re.compile(r"`([^`]+)`")


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def accepted_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every field path ``model`` accepts, by alias: ``spec.template.spec.nodeClassRef.name``."""
    paths: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}" if prefix else (info.alias or name)
        paths.add(path)
        for sub in _models_in(info.annotation):
            if sub is not model:
                paths |= accepted_paths(sub, path)
    return paths


def _sections() -> dict[str, dict[str, str]]:
    """``{section title: {name in the first cell: status}}`` for every table row on the page; the status is the
    second cell (the third in the annotations table, whose second says what carries the annotation)."""
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = {}
        elif current and line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            status = cells[2] if current == "Annotations" else cells[1]
            for name in _CODE.findall(cells[0]):
                sections[current][name] = status
    return sections


def _rows_for(section: str) -> dict[str, str]:
    sections = _sections()
    assert section in sections, f"no '## {section}' section on {PAGE.name}"
    return sections[section]


@pytest.mark.parametrize(
    ("model", "section"), [(NodePool, "NodePool"), (EC2NodeClass, "EC2NodeClass"), (NodeClaim, "NodeClaim")]
)
def test_every_field_the_model_accepts_has_a_row(model: type[BaseModel], section: str) -> None:
    accepted = accepted_paths(model)
    own = {p for p in accepted if not p.startswith("metadata.")}
    meta = {p for p in accepted if p.startswith("metadata.")}
    rows, meta_rows = _rows_for(section), _rows_for("Object metadata (all three kinds)")
    assert sorted(own - set(rows)) == [], f"fields of {section} missing from {PAGE.name}"
    assert sorted(meta - set(meta_rows)) == [], f"metadata fields missing from {PAGE.name}"
    stale = {r for r in rows if not r.endswith(".*") and r not in own}
    assert sorted(stale) == [], f"rows of {section} for fields the model does not accept"


def test_every_row_uses_a_status_of_the_legend() -> None:
    for section, rows in _sections().items():
        for path, status in rows.items():
            if section != "Features by name":
                assert status in STATUSES, f"{section}: {path}: {status!r}"


def test_every_well_known_label_has_a_row() -> None:
    rows = _rows_for("Well-known labels")
    assert sorted(WELL_KNOWN_LABELS - set(rows)) == []
    assert sorted(set(rows) - WELL_KNOWN_LABELS) == []


def test_every_annotation_nodesmith_reads_or_writes_has_a_row() -> None:
    text = "\n".join(_rows_for("Annotations"))
    for annotation in (
        DO_NOT_DISRUPT_ANNOTATION,
        DO_NOT_REPAIR_ANNOTATION,
        NODEPOOL_HASH_ANNOTATION,
        NODEPOOL_HASH_VERSION_ANNOTATION,
        NODECLASS_HASH_ANNOTATION,
        NODECLASS_HASH_VERSION_ANNOTATION,
        TERMINATION_TIMESTAMP_ANNOTATION,
    ):
        assert annotation in text, annotation


def test_the_walk_finds_nested_fields_by_alias() -> None:
    paths = accepted_paths(NodePool)
    assert "spec.template.spec.requirements.minValues" in paths
    assert "spec.disruption.budgets.reasons" in paths
    assert "spec.metadataOptions.httpProtocolIPv6" in accepted_paths(EC2NodeClass)
    assert "lastPodEventTime" in accepted_paths(NodeClaimStatus)


def test_a_field_added_to_a_model_is_reported_missing() -> None:
    extended = create_model("Extended", __base__=NodePool, shinyNewField=(str | None, None))
    assert "shinyNewField" in accepted_paths(extended) - set(_rows_for("NodePool"))
