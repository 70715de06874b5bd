"""Karpenter's objects through the API server: NodePools and EC2NodeClasses (read), NodeClaims (read-write).

:class:`KarpenterObjects` holds the raw list/parse helpers :class:`~nodesmith.adapters.kube.cluster.KubeCluster`
builds on, and the ``karpenter.sh/v1`` and ``karpenter.k8s.aws/v1`` calls of the
:class:`~nodesmith.core.ports.Cluster` port. Every method raises :mod:`nodesmith.core.errors` types.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from nodesmith.adapters.kube.calls import MERGE_PATCH, KubeRest, path
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.errors import KubernetesError, NotFoundError
from nodesmith.core.labels import LABEL_INSTANCE_ID
from nodesmith.core.objects import ObjectParseError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["KARPENTER_AWS_GROUP", "KARPENTER_GROUP", "KarpenterObjects"]

log = logging.getLogger(__name__)

_M = TypeVar("_M", NodePool, EC2NodeClass)

KARPENTER_GROUP = "karpenter.sh"
KARPENTER_AWS_GROUP = "karpenter.k8s.aws"
CRD_VERSION = "v1"
_SERVER_SET_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation", "managedFields")
_SELECTOR_IDS = 100
"""Instance ids one NodeClaim list selects at most (about 2 KiB of label selector in the request's query)."""


def _crd(group: str, plural: str, *rest: str) -> str:
    return path("apis", group, CRD_VERSION, plural, *rest)


class KarpenterObjects:
    """Raw reads (``_list`` pages through a collection, ``_parse`` turns a parse failure into a
    ``KubernetesError`` naming the object) and Karpenter's objects; ``rest`` and ``page_size`` are set by
    the subclass."""

    rest: KubeRest
    page_size: int

    def _list(self, url_path: str, *, what: str, **query: Any) -> list[dict[str, Any]]:
        return self.rest.list(url_path, what=what, page_size=self.page_size, **query)

    @staticmethod
    def _parse(parser: Callable[[Any], Any], item: Mapping[str, Any], kind: str) -> Any:
        try:
            return parser(item)
        except (ObjectParseError, ValidationError) as exc:
            meta = item.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
            raise KubernetesError(f"{kind} {name}: cannot read: {exc}") from exc

    def _custom(self, group: str, plural: str) -> list[dict[str, Any]]:
        return self._list(_crd(group, plural), what=f"list {plural}.{group}")

    def _valid(self, model: type[_M], group: str, plural: str) -> list[_M]:
        """Every object of a user-owned kind that validates as ``model``; one that does not is logged and skipped,
        so the others still work."""
        out: list[_M] = []
        for item in self._custom(group, plural):
            try:
                out.append(model.model_validate(item))
            except ValidationError as exc:
                log.warning("skipping invalid %s %s: %s", model.__name__, (item.get("metadata") or {}).get("name"), exc)
        return out

    def list_nodepools(self) -> list[NodePool]:
        """All NodePools. One that fails validation is logged and skipped, so the others still work."""
        return self._valid(NodePool, KARPENTER_GROUP, "nodepools")

    def list_ec2nodeclasses(self) -> list[EC2NodeClass]:
        """All EC2NodeClasses. One that fails validation is logged and skipped."""
        return self._valid(EC2NodeClass, KARPENTER_AWS_GROUP, "ec2nodeclasses")

    def list_nodeclaims(self) -> list[NodeClaim]:
        """All NodeClaims. An unreadable one raises ``KubernetesError`` (never silently orphaned)."""
        items = self._custom(KARPENTER_GROUP, "nodeclaims")
        return [self._parse(NodeClaim.model_validate, i, "nodeclaim") for i in items]

    # ----------------------------------------------------------------- NodeClaims
    def get_nodeclaim(self, *, name: str) -> NodeClaim | None:
        """One NodeClaim by name (one GET), or None on 404; an unreadable one raises ``KubernetesError``."""
        try:
            doc = self.rest.request("GET", _crd(KARPENTER_GROUP, "nodeclaims", name), what=f"get nodeclaim {name}")
        except NotFoundError:
            return None
        return self._parse(NodeClaim.model_validate, doc, "nodeclaim")  # type: ignore[no-any-return]

    def create_nodeclaim(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        """Create ``nodeclaim`` (the API server drops its status); ``ConflictError`` if it exists."""
        body = nodeclaim.model_dump_k8s()
        meta = body.setdefault("metadata", {})
        for key in _SERVER_SET_META:
            meta.pop(key, None)
        body.pop("status", None)
        doc = self.rest.request(
            "POST", _crd(KARPENTER_GROUP, "nodeclaims"), body=body, what=f"create nodeclaim {nodeclaim.name}"
        )
        return self._parse(NodeClaim.model_validate, doc, "nodeclaim")  # type: ignore[no-any-return]

    def update_nodeclaim_status(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        """PUT ``nodeclaim.status`` on the status subresource.

        The NodeClaim's ``resourceVersion`` (when set) is a precondition: ``ConflictError`` if it
        changed since it was read; ``NotFoundError`` if it is gone.
        """
        doc = self.rest.request(
            "PUT",
            _crd(KARPENTER_GROUP, "nodeclaims", nodeclaim.name, "status"),
            body=nodeclaim.model_dump_k8s(),
            what=f"update nodeclaim {nodeclaim.name} status",
        )
        return self._parse(NodeClaim.model_validate, doc, "nodeclaim")  # type: ignore[no-any-return]

    def label_nodeclaim(self, *, name: str, labels: Mapping[str, str]) -> None:
        """Merge ``labels`` into the NodeClaim's labels; ``NotFoundError`` if it is gone."""
        self.rest.request(
            "PATCH",
            _crd(KARPENTER_GROUP, "nodeclaims", name),
            body={"metadata": {"labels": dict(labels)}},
            content_type=MERGE_PATCH,
            what=f"label nodeclaim {name}",
        )

    def nodeclaims_for_instances(self, *, instance_ids: Sequence[str]) -> dict[str, NodeClaim]:
        """The NodeClaims labelled ``nodesmith.dev/instance-id`` with these ids, by instance id: one list (a
        set-based label selector) per :data:`_SELECTOR_IDS` ids; a NodeClaim whose ``status.providerID`` names
        another instance is left out. ``KubernetesError`` when a list fails or a NodeClaim cannot be read."""
        ids = list(dict.fromkeys(i for i in instance_ids if i))
        out: dict[str, NodeClaim] = {}
        for start in range(0, len(ids), _SELECTOR_IDS):
            chunk = ids[start : start + _SELECTOR_IDS]
            items = self._list(
                _crd(KARPENTER_GROUP, "nodeclaims"),
                what="list nodeclaims by instance id",
                labelSelector=f"{LABEL_INSTANCE_ID} in ({','.join(chunk)})",
            )
            for item in items:
                claim = self._parse(NodeClaim.model_validate, item, "nodeclaim")
                iid = claim.metadata.labels.get(LABEL_INSTANCE_ID, "")
                if iid in chunk and (claim.status.provider_id or "").rsplit("/", 1)[-1] == iid:
                    out[iid] = claim
        return out

    def delete_nodeclaim(self, *, name: str) -> None:
        """Remove the NodeClaim's finalizers, then delete it; already gone is fine."""
        url = _crd(KARPENTER_GROUP, "nodeclaims", name)
        try:
            self.rest.request(
                "PATCH",
                url,
                body={"metadata": {"finalizers": None}},
                content_type=MERGE_PATCH,
                what=f"remove finalizers of nodeclaim {name}",
            )
            self.rest.request("DELETE", url, what=f"delete nodeclaim {name}")
        except NotFoundError:
            return
