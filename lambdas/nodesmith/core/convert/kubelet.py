"""Kubelet settings: from the NodePool (v1alpha5 ``spec.kubeletConfiguration``, v1beta1
``spec.template.spec.kubelet``) to the EC2NodeClass (v1 ``spec.kubelet``).

Rules: v1 migration guide, "Kubelet Configuration" (``[aws]:website/content/en/v1.0/upgrading/
v1-migration.md``): kubelet moved to the EC2NodeClass; NodePools that share an EC2NodeClass but
had different kubelet settings need separate EC2NodeClasses (which drifts their nodes). The v1beta1
migration guide drops ``containerRuntime`` (containerd only). Field names and types:
``[core]:pkg/apis/v1alpha5/machine.go@v0.31.0 KubeletConfiguration`` and
``[core]:pkg/apis/v1beta1/nodeclaim.go@v0.37.0``; same names in v1.

Placement (:func:`place_kubelets`): for each EC2NodeClass, the pools referencing it are grouped by
kubelet block (no block is a group too). A v1 class that already has a kubelet keeps it; otherwise
the largest group (first seen on ties) has its block written to the class. Every pool of another
group gets its own copy of the class, ``<class>-<pool>``, carrying that pool's block, and is pointed
at it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.api.kubelet import PARSED_KUBELET_FIELDS
from nodesmith.core.convert.fields import Fields, canonical, quantity_map

if TYPE_CHECKING:
    from nodesmith.core.convert.notes import NoteSink

__all__ = ["ClassSlot", "PoolSlot", "convert_kubelet", "place_kubelets"]

_QUANTITY_MAPS: Final = ("systemReserved", "kubeReserved", "evictionHard", "evictionSoft", "evictionSoftGracePeriod")


def convert_kubelet(kubelet: Fields) -> dict[str, Any] | None:
    """The v1 ``EC2NodeClass.spec.kubelet`` for a v1alpha5/v1beta1 kubelet block; None when empty.

    Maps of quantities get string values (``cpu: 1`` -> ``"1"``); ``containerRuntime`` is dropped
    with a note, as is any unknown field.
    """
    out: dict[str, Any] = {}
    for key in PARSED_KUBELET_FIELDS:
        if key not in kubelet:
            continue
        value = kubelet.take(key)
        out[key] = quantity_map(value) if key in _QUANTITY_MAPS and isinstance(value, dict) else value
    if "containerRuntime" in kubelet:
        runtime = kubelet.take("containerRuntime")
        kubelet.notes.dropped(kubelet.at("containerRuntime"), f"{runtime!r}: removed in v1beta1 (containerd only)")
    kubelet.report_unused()
    return out or None


@dataclass(slots=True)
class PoolSlot:
    """A converted NodePool waiting for its kubelet block to be placed.

    ``body`` is the v1 manifest (its ``nodeClassRef.name`` may be changed to a class copy);
    ``class_name`` the EC2NodeClass it references (None when it references another kind).
    """

    name: str
    body: dict[str, Any]
    class_name: str | None
    kubelet: dict[str, Any] | None
    kubelet_path: str
    notes: NoteSink


@dataclass(slots=True)
class ClassSlot:
    """A converted EC2NodeClass; ``copies`` receives per-pool copies made by :func:`place_kubelets`."""

    name: str
    body: dict[str, Any]
    notes: NoteSink
    copies: list[dict[str, Any]] = field(default_factory=list)


def place_kubelets(pools: list[PoolSlot], classes: dict[str, ClassSlot], taken_names: set[str]) -> None:
    """Write each pool's kubelet block onto its EC2NodeClass (or a per-pool copy), in place.

    ``taken_names`` holds every EC2NodeClass name in use; copy names are added to it. A pool whose
    class is not in ``classes`` keeps nothing and gets an "action needed" note with the block to add.
    """
    by_class: dict[str, list[PoolSlot]] = {}
    for pool in pools:
        if pool.class_name is None:
            if pool.kubelet is not None:
                pool.notes.dropped(pool.kubelet_path, "the pool does not reference an EC2NodeClass to carry it")
            continue
        by_class.setdefault(pool.class_name, []).append(pool)
    for class_name, members in by_class.items():
        slot = classes.get(class_name)
        if slot is None:
            for pool in members:
                if pool.kubelet is not None:
                    pool.notes.action(
                        pool.kubelet_path,
                        f"EC2NodeClass {class_name} is not in the input: add spec.kubelet: "
                        f"{canonical(pool.kubelet)} to it (Karpenter v1 reads kubelet settings there)",
                    )
            continue
        _place(slot, members, taken_names)


def _place(slot: ClassSlot, members: list[PoolSlot], taken_names: set[str]) -> None:
    groups: dict[str, list[PoolSlot]] = {}
    for pool in members:
        groups.setdefault(canonical(pool.kubelet), []).append(pool)
    existing = slot.body["spec"].get("kubelet")
    if existing is not None:
        primary = canonical(existing)
    else:
        primary = max(groups, key=lambda k: len(groups[k]))  # first seen wins ties
        chosen = groups[primary][0].kubelet
        if chosen is not None:
            slot.body["spec"]["kubelet"] = copy.deepcopy(chosen)
    for pool in groups.get(primary, []):
        if pool.kubelet is not None:
            pool.notes.changed(pool.kubelet_path, f"moved to EC2NodeClass {slot.name} spec.kubelet")
    others = [pool for key, group in groups.items() if key != primary for pool in group]
    if not others:
        return
    names = ", ".join(p.name for p in members)
    slot.notes.action(
        "spec",
        f"NodePools {names} share this class with different kubelet settings; "
        f"per-pool copies were made (nodes of repointed pools will drift and be replaced)",
    )
    for pool in others:
        copy_name = _unique(f"{slot.name}-{pool.name}", taken_names)
        body = copy.deepcopy(slot.body)
        # A new object: keep what users write, never the source's uid, resourceVersion or status.
        kept = {k: v for k, v in body["metadata"].items() if k in ("labels", "annotations")}
        body["metadata"] = {"name": copy_name, **kept}
        body.pop("status", None)
        if pool.kubelet is None:
            body["spec"].pop("kubelet", None)
        else:
            body["spec"]["kubelet"] = copy.deepcopy(pool.kubelet)
        slot.copies.append(body)
        pool.body["spec"]["template"]["spec"]["nodeClassRef"]["name"] = copy_name
        what = "its kubelet settings" if pool.kubelet is not None else "no kubelet settings"
        pool.notes.changed(
            pool.kubelet_path if pool.kubelet is not None else "",
            f"EC2NodeClass {slot.name} is shared by pools with different kubelet settings: this pool now "
            f"references a copy, {copy_name}, with {what}",
        )


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate = f"{name}-{n}"
        n += 1
    taken.add(candidate)
    return candidate
