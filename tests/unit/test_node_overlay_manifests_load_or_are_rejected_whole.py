"""NodeOverlay manifests (``karpenter.sh/v1alpha1``) load into the bundle; a malformed one rejects its file with
the file, document, overlay, field path and Karpenter's reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from nodesmith.adapters.manifests import load_manifest_text, load_manifests
from nodesmith.core.errors import ManifestError

if TYPE_CHECKING:
    from pathlib import Path

POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
"""

OVERLAY = """\
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: fuse}
spec:
  weight: 20
  requirements:
    - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
  priceAdjustment: "-10%"
  capacity: {smarter-devices/fuse: 1}
"""


def test_an_overlay_loads_with_its_spec() -> None:
    bundle = load_manifest_text(POOL + OVERLAY, source="overlay.yaml")
    [overlay] = bundle.nodeoverlays
    assert overlay.name == "fuse" and overlay.weight_or_zero == 20
    assert overlay.spec.price_adjustment == "-10%" and overlay.spec.capacity == {"smarter-devices/fuse": "1"}
    assert [r.key for r in overlay.requirements_core()] == [
        "karpenter.k8s.aws/instance-family",
        "karpenter.sh/capacity-type",
    ]
    assert not bundle.ignored


@pytest.mark.parametrize(
    ("old", "new", "field", "says"),
    [
        ('priceAdjustment: "-10%"', 'priceAdjustment: "-10%"\n  price: "0.2"', "spec", "cannot set both"),
        ('priceAdjustment: "-10%"', 'priceAdjustment: "10%"', "spec.priceAdjustment", "is not a price adjustment"),
        ('priceAdjustment: "-10%"', "priceAdjustment: 0.1", "spec.priceAdjustment", "quote it in YAML"),
        ('priceAdjustment: "-10%"', 'price: "-0.2"', "spec.price", "is not a price"),
        ("smarter-devices/fuse: 1", "memory: 1Gi", "spec.capacity", "invalid resource restricted: memory"),
        ("weight: 20", "weight: 20000", "spec.weight", "less than or equal to 10000"),
        ("operator: In, values: [m5]", "operator: NotIn", "spec.requirements[0]", "must have a value defined"),
        ("karpenter.k8s.aws/instance-family", "karpenter.sh/team", "spec.requirements[0].key", "restricted"),
        ("capacity:", "capacty:", "spec.capacty", "unknown field"),
    ],
)
def test_a_malformed_overlay_rejects_the_file_naming_field_and_reason(
    old: str, new: str, field: str, says: str
) -> None:
    text = POOL + OVERLAY.replace(old, new)
    with pytest.raises(ManifestError) as exc:
        load_manifest_text(text, source="overlay.yaml")
    assert exc.value.field == field
    assert str(exc.value).startswith(f"overlay.yaml: document 2 (NodeOverlay fuse): {field}: ")
    assert says in str(exc.value)


def test_two_overlays_of_one_name_are_a_duplicate(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(OVERLAY)
    (tmp_path / "b.yaml").write_text(OVERLAY)
    with pytest.raises(ManifestError, match="duplicate NodeOverlay fuse"):
        load_manifests([tmp_path / "a.yaml", tmp_path / "b.yaml"])
