"""The pods of nodes going away are provisioned for as pending copies (Karpenter's reschedulable pods); a pod
object passed again, as the Kubernetes adapter passes an unchanged pod's parse, gets the copy it got before."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reconcile_fakes import make_pod

from nodesmith.services.provisioning.capacity import reschedulable_pods

if TYPE_CHECKING:
    from nodesmith.core.model import Pod


def _bound(name: str, node: str, **kwargs: Any) -> Pod:
    return make_pod(name, node_name=node, unschedulable=False, nominated_node_name=node, **kwargs)


def test_the_pods_of_leaving_nodes_come_back_unbound_and_unschedulable() -> None:
    web, db, ds = _bound("web", "n1"), _bound("db", "n2"), _bound("ds", "n1", owner_kind="DaemonSet")
    out = reschedulable_pods([web, db, ds], leaving={"n1"})

    assert [p.name for p in out] == ["web"]  # not db (its node stays), not the DaemonSet pod
    assert out[0].node_name is None and out[0].nominated_node_name is None and out[0].unschedulable
    assert out[0].requests == web.requests


def test_a_pod_passed_again_gets_the_same_copy_and_a_changed_pod_a_new_one() -> None:
    web, api = _bound("web", "n1"), _bound("api", "n1")
    first = reschedulable_pods([web, api], leaving={"n1"})

    changed = replace(api, labels={"version": "2"})
    second = reschedulable_pods([web, changed], leaving={"n1", "n2"})

    assert second[0] is first[0]  # web: the same parse, so the same pending copy
    assert second[1] is not first[1] and second[1].labels == {"version": "2"} and second[1].node_name is None

    third = reschedulable_pods([web], leaving={"n2"})  # web's node no longer leaves
    assert third == []
    assert reschedulable_pods([web], leaving={"n1"})[0] is not first[0]  # only the last call's copies are kept
