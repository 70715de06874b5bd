"""Converting to v1 (``nodesmith.core.convert``): kubelet settings move from pools to their
EC2NodeClass, shared when equal and copied per pool when they differ.

Each test feeds parsed manifests as users wrote them and checks the v1 result and the notes, as the
Karpenter upgrade guides (v1beta1 and v1 migration) and conversion webhooks describe the mapping.
"""

from __future__ import annotations

from convert_factories import beta_class, beta_pool, class_of, notes_at, pool_of, provisioner, template

from nodesmith.core.convert import convert


def test_provisioner_kubelet_moves_to_its_class() -> None:
    kubelet = {"maxPods": 110, "systemReserved": {"cpu": "100m", "memory": 100}, "containerRuntime": "containerd"}
    docs, notes = convert([provisioner(kubeletConfiguration=kubelet), template()])

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110, "systemReserved": {"cpu": "100m", "memory": "100"}}
    assert "kubelet" not in pool_of(docs)["spec"]["template"]["spec"]
    assert notes_at(notes, "spec.kubeletConfiguration.containerRuntime")[0].kind == "dropped"


def test_pools_with_equal_kubelets_share_the_class_without_copies() -> None:
    kubelet = {"maxPods": 58}
    docs, _ = convert(
        [provisioner("a", kubeletConfiguration=kubelet), provisioner("b", kubeletConfiguration=kubelet), template()]
    )

    assert [d["metadata"]["name"] for d in docs if d["kind"] == "EC2NodeClass"] == ["default"]
    assert class_of(docs)["spec"]["kubelet"] == kubelet


def test_pools_with_different_kubelets_get_per_pool_class_copies() -> None:
    docs, notes = convert(
        [
            beta_pool("general", kubelet={"maxPods": 110}),
            beta_pool("gpu", kubelet={"maxPods": 32}),
            beta_pool("plain"),
            beta_class(),
        ]
    )

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110}
    assert class_of(docs, "default-gpu")["spec"]["kubelet"] == {"maxPods": 32}
    assert "kubelet" not in class_of(docs, "default-plain")["spec"]
    refs = {
        p: pool_of(docs, p)["spec"]["template"]["spec"]["nodeClassRef"]["name"] for p in ("general", "gpu", "plain")
    }
    assert refs == {"general": "default", "gpu": "default-gpu", "plain": "default-plain"}
    copy_spec = {k: v for k, v in class_of(docs, "default-gpu")["spec"].items() if k != "kubelet"}
    assert copy_spec == {k: v for k, v in class_of(docs)["spec"].items() if k != "kubelet"}
    assert any(n.kind == "action" and n.obj == "EC2NodeClass/default" for n in notes)


def test_kubelet_for_a_class_outside_the_input_is_left_as_an_action() -> None:
    docs, notes = convert([provisioner(kubeletConfiguration={"maxPods": 20})])

    assert [d["kind"] for d in docs] == ["NodePool"]
    [note] = notes_at(notes, "spec.kubeletConfiguration")
    assert note.kind == "action"
    assert '{"maxPods": 20}' in note.message


def test_v1_class_keeps_its_kubelet_and_a_differing_pool_gets_a_copy() -> None:
    v1_class = convert([beta_class()])[0][0]
    v1_class["spec"]["kubelet"] = {"maxPods": 110}
    v1_class["metadata"].update(uid="1234", resourceVersion="7", labels={"team": "platform"})
    v1_class["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    docs, _ = convert([beta_pool(kubelet={"maxPods": 32}), v1_class])

    assert class_of(docs)["spec"]["kubelet"] == {"maxPods": 110}
    copied = class_of(docs, "default-default")
    assert copied["spec"]["kubelet"] == {"maxPods": 32}
    assert copied["metadata"] == {"name": "default-default", "labels": {"team": "platform"}}
    assert "status" not in copied
