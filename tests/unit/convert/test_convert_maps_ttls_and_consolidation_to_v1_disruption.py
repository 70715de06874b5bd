"""Converting to v1 (``nodesmith.core.convert``): empty/expiry TTLs and consolidation become the v1
NodePool's ``disruption`` and the template's ``expireAfter``.

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

from typing import Any

import pytest
from convert_factories import beta_class, beta_pool, notes_at, pool_of, provisioner, template

from nodesmith.core.convert import ConversionError, convert


def test_ttl_seconds_after_empty_becomes_when_empty_with_the_same_seconds() -> None:
    docs, notes = convert([provisioner(ttlSecondsAfterEmpty=30), template()])

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    [note] = notes_at(notes, "spec.ttlSecondsAfterEmpty")
    assert note.kind == "changed"
    assert "WhenEmpty" in note.message


def test_consolidation_enabled_becomes_when_empty_or_underutilized() -> None:
    docs, _ = convert([provisioner(consolidation={"enabled": True}), template()])

    assert pool_of(docs)["spec"]["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
    }


@pytest.mark.parametrize("consolidation", [None, {"enabled": False}])
def test_provisioner_without_empty_ttl_or_consolidation_never_consolidates(consolidation: Any) -> None:
    spec = {} if consolidation is None else {"consolidation": consolidation}
    docs, _ = convert([provisioner(**spec), template()])

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}


def test_empty_ttl_with_consolidation_is_refused_like_v1alpha5() -> None:
    with pytest.raises(ConversionError, match=r"Provisioner/default: spec.ttlSecondsAfterEmpty"):
        convert([provisioner(ttlSecondsAfterEmpty=30, consolidation={"enabled": True}), template()])


@pytest.mark.parametrize(("seconds", "expected"), [(2592000, "720h"), (5400, "90m"), (90, "90s"), (None, "Never")])
def test_ttl_seconds_until_expired_becomes_template_expire_after(seconds: int | None, expected: str) -> None:
    spec = {} if seconds is None else {"ttlSecondsUntilExpired": seconds}
    docs, notes = convert([provisioner(**spec), template()])

    assert pool_of(docs)["spec"]["template"]["spec"]["expireAfter"] == expected
    assert [n.kind for n in notes_at(notes, "spec.ttlSecondsUntilExpired")] == ["changed"]


def test_negative_ttl_is_bad_input() -> None:
    with pytest.raises(ConversionError, match="non-negative"):
        convert([provisioner(ttlSecondsAfterEmpty=-1), template()])


def test_v1beta1_when_underutilized_is_renamed_and_expire_after_moves_to_the_template() -> None:
    budgets = [{"nodes": "20%"}, {"nodes": 0, "schedule": "0 9 * * mon-fri", "duration": "8h"}]
    pool = beta_pool(disruption={"consolidationPolicy": "WhenUnderutilized", "expireAfter": "336h", "budgets": budgets})
    docs, notes = convert([pool, beta_class()])

    spec = pool_of(docs)["spec"]
    assert spec["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "20%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}],
    }
    assert spec["template"]["spec"]["expireAfter"] == "336h"
    assert notes_at(notes, "spec.disruption.expireAfter")[0].kind == "changed"
    assert notes_at(notes, "spec.disruption.consolidationPolicy")[0].kind == "changed"


def test_v1beta1_when_empty_keeps_consolidate_after() -> None:
    docs, _ = convert(
        [beta_pool(disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}), beta_class()]
    )

    assert pool_of(docs)["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}
