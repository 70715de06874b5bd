"""Converting to v1 (``nodesmith.core.convert``) as a whole: lists, dropped and refused kinds,
duplicates, validation of the result, notes, the legacy fixtures, and malformed documents raising
only ``ConversionError``.

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from convert_factories import LEGACY, beta_pool, provisioner, template
from hypothesis import given, settings
from hypothesis import strategies as st

from nodesmith.core.api import EC2NodeClass, NodePool
from nodesmith.core.convert import ConversionError, InputDocument, Note, convert, convert_documents


def test_machines_are_dropped_and_unknown_karpenter_kinds_refused() -> None:
    machine = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Machine", "metadata": {"name": "m"}}
    docs, notes = convert([machine])
    assert docs == []
    assert notes[0].kind == "dropped"

    with pytest.raises(ConversionError, match=r"unsupported Karpenter object karpenter\.sh/v1alpha4 Provisioner"):
        convert([{"apiVersion": "karpenter.sh/v1alpha4", "kind": "Provisioner", "metadata": {"name": "x"}}])


def test_lists_are_unpacked() -> None:
    docs, _ = convert([{"apiVersion": "v1", "kind": "List", "items": [provisioner(), template()]}])

    assert sorted(d["kind"] for d in docs) == ["EC2NodeClass", "NodePool"]


def test_duplicate_pool_names_are_refused() -> None:
    with pytest.raises(ConversionError, match="another Provisioner/NodePool"):
        convert([provisioner(), beta_pool(), template()])


def test_result_that_would_not_validate_names_the_object_and_field() -> None:
    bad = provisioner(taints=[{"key": "a", "effect": "Sometimes"}])
    with pytest.raises(ConversionError) as info:
        convert([bad, template()])

    message = str(info.value)
    assert "Provisioner/default" in message
    assert "spec.template.spec.taints[0].effect" in message
    assert "not valid v1" in message


def test_note_renders_with_source_object_label_and_path() -> None:
    note = Note("dropped", "Provisioner/legacy", "spec.provider.launchTemplate", "removed", "f.yaml#3")

    assert note.render() == "f.yaml#3 Provisioner/legacy: not carried over: spec.provider.launchTemplate: removed"


@pytest.mark.parametrize(
    "names", [["v1alpha5-provisioners.yaml", "v1alpha5-workloads.yaml"], ["v1beta1-nodepools.yaml"]]
)
def test_legacy_fixtures_convert_to_objects_the_v1_models_accept(names: list[str]) -> None:
    inputs = [
        InputDocument(body=doc, source=name, document=i + 1)
        for name in names
        for i, doc in enumerate(yaml.safe_load_all((LEGACY / name).read_text()))
        if doc
    ]
    result = convert_documents(inputs)

    karpenter = [d.body for d in result.documents if d.body["kind"] in ("NodePool", "EC2NodeClass")]
    assert karpenter
    for body in karpenter:
        model = NodePool if body["kind"] == "NodePool" else EC2NodeClass
        model.model_validate(body)
        assert body["apiVersion"] in ("karpenter.sh/v1", "karpenter.k8s.aws/v1")
    pool_refs = {d["spec"]["template"]["spec"]["nodeClassRef"]["name"] for d in karpenter if d["kind"] == "NodePool"}
    assert pool_refs <= {d["metadata"]["name"] for d in karpenter if d["kind"] == "EC2NodeClass"}
    assert all(n.source for n in result.notes)


_JUNK = st.sampled_from([None, 1, -3, True, "", "x", "1,2", [], {}, [1], {"a": 1}, ["a", None], {"": ""}])
_FIXTURE_GROUPS = [
    [d for d in yaml.safe_load_all((LEGACY / name).read_text()) if d]
    for name in ("v1alpha5-provisioners.yaml", "v1alpha5-workloads.yaml", "v1beta1-nodepools.yaml")
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    children: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        children = [p for k, v in node.items() for p in _paths(v, (*prefix, k))]
    elif isinstance(node, list):
        children = [p for i, v in enumerate(node) for p in _paths(v, (*prefix, i))]
    return [prefix, *children]


@settings(max_examples=200, deadline=None)
@given(group=st.sampled_from(_FIXTURE_GROUPS), data=st.data())
def test_malformed_documents_raise_only_conversion_errors(group: list[dict[str, Any]], data: st.DataObject) -> None:
    docs = copy.deepcopy(group)
    for _ in range(data.draw(st.integers(1, 3))):
        doc = data.draw(st.sampled_from(docs))
        path = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = copy.deepcopy(data.draw(_JUNK))
    try:
        convert(docs)
    except ConversionError as exc:
        assert str(exc)
