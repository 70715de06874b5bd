"""Capacity reservations in ``nodesmith simulate --capacity-reservations FILE``.

``FILE`` is what ``aws ec2 describe-capacity-reservations`` prints (``{"CapacityReservations": [...]}``, JSON): the
reservations EC2 holds and how many instances each can still take (``AvailableInstanceCount``). Each EC2NodeClass's
``capacityReservationSelectorTerms`` select among them as the reconcile Lambda's DescribeCapacityReservations
filters would (:func:`nodesmith.adapters.aws.capacity_reservations.select_described`), and the selected
reservations add ``reserved`` offerings to the types of the NodePools using that class
(:func:`nodesmith.core.capacityreservations.with_reserved_offerings`): priced at the on-demand price / 1e7, so a
NodePool that allows ``reserved`` plans them first, and a reservation with nothing available is passed over
(spot or on-demand instead).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nodesmith.cli.exits import BadInput

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nodesmith.adapters.manifests import ManifestBundle
    from nodesmith.core.model import InstanceType

__all__ = ["read_capacity_reservations", "with_capacity_reservations"]


def read_capacity_reservations(path: Path) -> list[dict[str, Any]]:
    """The ``CapacityReservations`` items of a DescribeCapacityReservations answer saved as JSON. Raises
    ``BadInput`` naming the file and what is wrong."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"--capacity-reservations {path}: {exc}") from exc
    items = doc.get("CapacityReservations") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) and i.get("CapacityReservationId") for i in items):
        raise BadInput(
            f"--capacity-reservations {path}: expected the output of 'aws ec2 describe-capacity-reservations', "
            '{"CapacityReservations": [{"CapacityReservationId": ..., ...}]}'
        )
    return items


def with_capacity_reservations(
    bundle: ManifestBundle,
    *,
    shared: Sequence[InstanceType],
    per_pool: dict[str, list[InstanceType]],
    items: Sequence[dict[str, Any]],
    now: float,
) -> tuple[list[InstanceType], dict[str, list[InstanceType]]]:
    """``(shared, per_pool)`` with each NodePool's types given the reserved offerings its EC2NodeClass selects
    among ``items`` (``shared`` those of the first node class in use, by name). Raises ``BadInput`` for an
    unreadable item."""
    from nodesmith.adapters.aws.capacity_reservations import select_described
    from nodesmith.core.capacityreservations import with_reserved_offerings

    classes = {nc.name: nc for nc in bundle.ec2nodeclasses}

    def reserved(types: Sequence[InstanceType], name: str) -> list[InstanceType]:
        terms = [
            t.model_dump(by_alias=True, exclude_none=True)
            for t in classes[name].spec.capacity_reservation_selector_terms
        ]
        try:
            selected = select_described(items, terms=terms, now=now) if terms else []
        except ValueError as exc:
            raise BadInput(f"--capacity-reservations: {exc}") from exc
        return with_reserved_offerings(types, selected, zones=None, now=now)

    used = sorted({np.spec.template.spec.node_class_ref.name for np in bundle.nodepools} & set(classes))
    if not used:
        return list(shared), per_pool
    pools = {
        np.name: reserved(per_pool.get(np.name, shared), np.spec.template.spec.node_class_ref.name)
        for np in bundle.nodepools
        if np.spec.template.spec.node_class_ref.name in classes
    }
    return reserved(shared, used[0]), pools
