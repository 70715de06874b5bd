"""Karpenter's objects through the API server: NodePools and EC2NodeClasses (read), NodeOverlays (read, status
written), NodeClaims (read-write).

:class:`KarpenterObjects` holds the raw list/parse helpers :class:`~nodesmith.adapters.kube.cluster.KubeCluster`
builds on, and the ``karpenter.sh/v1`` and ``karpenter.k8s.aws/v1`` calls of the
:class:`~nodesmith.core.ports.Cluster` port. Every method raises :mod:`nodesmith.core.errors` types.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from nodesmith.adapters.kube.calls import MERGE_PATCH, KubeRest, may_have_applied, path
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodeoverlay import NodeOverlay
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError
from nodesmith.core.objects import ObjectParseError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nodesmith.adapters.kube.informer import Informer

__all__ = ["KARPENTER_AWS_GROUP", "KARPENTER_GROUP", "KarpenterObjects"]

log = logging.getLogger(__name__)

_M = TypeVar("_M", NodePool, EC2NodeClass, NodeOverlay)

KARPENTER_GROUP = "karpenter.sh"
KARPENTER_AWS_GROUP = "karpenter.k8s.aws"
CRD_VERSION = "v1"
OVERLAY_VERSION = "v1alpha1"
_SERVER_SET_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation", "managedFields")


def _crd(group: str, plural: str, *rest: str, version: str = CRD_VERSION) -> str:
    return path("apis", group, version, plural, *rest)


def _contains(found: Any, sent: Any) -> bool:
    """Whether the mapping ``found`` holds every key of ``sent`` with the same value."""
    return isinstance(found, dict) and isinstance(sent, dict) and all(found.get(k) == v for k, v in sent.items())


def same_nodeclaim(sent: dict[str, Any], found: dict[str, Any]) -> bool:
    """Whether the NodeClaim ``found`` is the one whose create sent ``sent``: its labels, annotations and spec
    fields as sent (the API server may add defaults, never change what was sent)."""
    meta, found_meta = sent.get("metadata") or {}, found.get("metadata") or {}
    return (
        _contains(found_meta.get("labels") or {}, meta.get("labels") or {})
        and _contains(found_meta.get("annotations") or {}, meta.get("annotations") or {})
        and _contains(found.get("spec"), sent.get("spec") or {})
    )


class KarpenterObjects:
    """Raw reads (``_list`` pages through a collection, ``_parse`` turns a parse failure into a
    ``KubernetesError`` naming the object) and Karpenter's objects; ``rest`` and ``page_size`` are set by
    the subclass."""

    rest: KubeRest
    page_size: int
    _informers: dict[str, Informer[Any]]

    def _followed(self, kind: str) -> list[Any] | None:
        """The objects of ``kind`` an informer holds (:meth:`KubeCluster.follow`), or None when not followed."""
        informer = self._informers.get(kind)
        return informer.items() if informer is not None else None

    def _observe(self, kind: str, raw: Any) -> None:
        """Hand an object this process just wrote to the informer of ``kind``, if one follows it."""
        informer = self._informers.get(kind)
        if informer is not None and isinstance(raw, dict):
            informer.observe(raw)

    list_from_watch_cache: bool = False

    def _list(self, url_path: str, *, what: str, cached: bool = False, **query: Any) -> list[dict[str, Any]]:
        """Every item at ``url_path``; with ``cached`` (and :attr:`list_from_watch_cache`) read from the API
        server's watch cache (:meth:`~nodesmith.adapters.kube.calls.KubeRest.list`)."""
        return self.rest.list(
            url_path, what=what, page_size=self.page_size, cached=cached and self.list_from_watch_cache, **query
        )

    @staticmethod
    def _parse(parser: Callable[[Any], Any], item: Mapping[str, Any], kind: str) -> Any:
        try:
            return parser(item)
        except (ObjectParseError, ValidationError) as exc:
            meta = item.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
            raise KubernetesError(f"{kind} {name}: cannot read: {exc}") from exc

    def _custom(
        self, group: str, plural: str, version: str = CRD_VERSION, *, cached: bool = False
    ) -> list[dict[str, Any]]:
        return self._list(_crd(group, plural, version=version), what=f"list {plural}.{group}", cached=cached)

    def _valid(self, model: type[_M], group: str, plural: str, version: str = CRD_VERSION) -> list[_M]:
        """Every object of a user-owned kind that validates as ``model`` (read from the watch cache when
        :attr:`list_from_watch_cache`); one that does not is logged and skipped, so the others still work."""
        out: list[_M] = []
        for item in self._custom(group, plural, version, cached=True):
            try:
                out.append(model.model_validate(item))
            except ValidationError as exc:
                log.warning("skipping invalid %s %s: %s", model.__name__, (item.get("metadata") or {}).get("name"), exc)
        return out

    def list_nodepools(self) -> list[NodePool]:
        """All NodePools. One that fails validation is logged and skipped, so the others still work."""
        followed = self._followed("nodepools")
        if followed is not None:
            return [np for np in followed if np is not None]
        return self._valid(NodePool, KARPENTER_GROUP, "nodepools")

    def _nodepool_or_none(self, item: Mapping[str, Any]) -> NodePool | None:
        """A NodePool, or None (logged) when it fails validation: a user's bad NodePool leaves the others working."""
        try:
            return NodePool.model_validate(item)
        except ValidationError as exc:
            log.warning("skipping invalid NodePool %s: %s", (item.get("metadata") or {}).get("name"), exc)
            return None

    def list_ec2nodeclasses(self) -> list[EC2NodeClass]:
        """All EC2NodeClasses. One that fails validation is logged and skipped."""
        return self._valid(EC2NodeClass, KARPENTER_AWS_GROUP, "ec2nodeclasses")

    def list_nodeoverlays(self) -> list[NodeOverlay]:
        """All ``karpenter.sh/v1alpha1`` NodeOverlays. One that fails validation is logged and skipped (the CRD's
        schema would have refused it)."""
        return self._valid(NodeOverlay, KARPENTER_GROUP, "nodeoverlays", OVERLAY_VERSION)

    def patch_nodeoverlay_status(
        self, *, name: str, conditions: list[dict[str, object]], resource_version: str | None = None
    ) -> None:
        """Write ``status.conditions`` of NodeOverlay ``name`` with a merge patch of the status subresource.

        With ``resource_version`` the patch carries it, so the API server refuses it (``ConflictError``) when the
        overlay changed since it was read (Karpenter's ``MergeFromWithOptimisticLock``); ``NotFoundError`` if gone.
        """
        body: dict[str, Any] = {"status": {"conditions": conditions}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        self.rest.request(
            "PATCH",
            _crd(KARPENTER_GROUP, "nodeoverlays", name, "status", version=OVERLAY_VERSION),
            body=body,
            content_type=MERGE_PATCH,
            what=f"patch nodeoverlay {name} status",
        )

    def patch_ec2nodeclass_status(self, *, name: str, status: Mapping[str, Any]) -> EC2NodeClass:
        """Merge ``status`` into the EC2NodeClass's status subresource; returns the EC2NodeClass as written.
        ``NotFoundError`` if it is gone."""
        doc = self.rest.request(
            "PATCH",
            _crd(KARPENTER_AWS_GROUP, "ec2nodeclasses", name, "status"),
            body={"status": dict(status)},
            content_type=MERGE_PATCH,
            what=f"patch ec2nodeclass {name} status",
        )
        return self._parse(EC2NodeClass.model_validate, doc, "ec2nodeclass")  # type: ignore[no-any-return]

    def list_nodeclaims(self) -> list[NodeClaim]:
        """All NodeClaims. An unreadable one raises ``KubernetesError`` (never silently orphaned)."""
        followed = self._followed("nodeclaims")
        if followed is not None:
            return followed
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
        """Create ``nodeclaim`` (the API server drops its status); ``ConflictError`` if it exists.

        A create whose answer was lost (no answer, 5xx) is sent again, and one that the retry finds already
        created by this call (:func:`same_nodeclaim`) is returned as created (:meth:`KubeRest.create`)."""
        body = nodeclaim.model_dump_k8s()
        meta = body.setdefault("metadata", {})
        for key in _SERVER_SET_META:
            meta.pop(key, None)
        body.pop("status", None)
        doc = self.rest.create(
            _crd(KARPENTER_GROUP, "nodeclaims"),
            body=body,
            what=f"create nodeclaim {nodeclaim.name}",
            same=same_nodeclaim,
        )
        self._observe("nodeclaims", doc)
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
        self._observe("nodeclaims", doc)
        return self._parse(NodeClaim.model_validate, doc, "nodeclaim")  # type: ignore[no-any-return]

    def update_nodepool_status(self, *, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the NodePool's status subresource with ``status``; ``NotFoundError`` if it is gone."""
        self.rest.request(
            "PATCH",
            _crd(KARPENTER_GROUP, "nodepools", name, "status"),
            body={"status": dict(status)},
            content_type=MERGE_PATCH,
            what=f"update nodepool {name} status",
        )

    def label_nodeclaim(self, *, name: str, labels: Mapping[str, str]) -> None:
        """Merge ``labels`` into the NodeClaim's labels; ``NotFoundError`` if it is gone."""
        self.rest.request(
            "PATCH",
            _crd(KARPENTER_GROUP, "nodeclaims", name),
            body={"metadata": {"labels": dict(labels)}},
            content_type=MERGE_PATCH,
            what=f"label nodeclaim {name}",
        )

    def annotate_nodeclaim(
        self, *, name: str, annotations: Mapping[str, str], resource_version: str | None = None
    ) -> None:
        """Merge ``annotations`` into the NodeClaim's annotations; with ``resource_version`` the patch carries it,
        so the API server refuses it (``ConflictError``) when the NodeClaim changed since. ``NotFoundError`` if it
        is gone."""
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        self.rest.request(
            "PATCH",
            _crd(KARPENTER_GROUP, "nodeclaims", name),
            body={"metadata": meta},
            content_type=MERGE_PATCH,
            what=f"annotate nodeclaim {name}",
        )

    def delete_nodeclaim(self, *, name: str) -> None:
        """DELETE the NodeClaim (one with finalizers stays, deleting); already gone is fine."""
        try:
            self.rest.request("DELETE", _crd(KARPENTER_GROUP, "nodeclaims", name), what=f"delete nodeclaim {name}")
        except NotFoundError:
            return

    def remove_nodeclaim_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the NodeClaim (see :meth:`remove_finalizer`)."""
        self.remove_finalizer(_crd(KARPENTER_GROUP, "nodeclaims", name), finalizer=finalizer, what=f"nodeclaim {name}")

    def add_ec2nodeclass_finalizer(self, *, name: str, finalizer: str) -> bool:
        """Add ``finalizer`` to the EC2NodeClass ``name`` unless it has it or is being deleted (a finalizer cannot be
        added to an object being deleted); a guarded merge patch (:meth:`guarded_patch`). Returns False when the
        EC2NodeClass is gone. ``ConflictError`` after repeated conflicts."""
        url = _crd(KARPENTER_AWS_GROUP, "ec2nodeclasses", name)

        def read(_first: bool) -> dict[str, Any] | None:
            try:
                found: dict[str, Any] = self.rest.request("GET", url, what=f"get ec2nodeclass {name}") or {}
                return found
            except NotFoundError:
                return None

        def edit(doc: dict[str, Any]) -> dict[str, Any] | None:
            meta = doc.get("metadata") or {}
            finalizers = list(meta.get("finalizers") or [])
            if finalizer in finalizers or meta.get("deletionTimestamp"):
                return None
            return {"metadata": {"finalizers": [*finalizers, finalizer]}}

        return self.guarded_patch(url, what=f"add {finalizer} to ec2nodeclass {name}", edit=edit, read=read)

    def remove_ec2nodeclass_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the EC2NodeClass ``name`` (see :meth:`remove_finalizer`)."""
        url = _crd(KARPENTER_AWS_GROUP, "ec2nodeclasses", name)
        self.remove_finalizer(url, finalizer=finalizer, what=f"ec2nodeclass {name}")

    def guarded_patch(
        self,
        url_path: str,
        *,
        what: str,
        edit: Callable[[dict[str, Any]], dict[str, Any] | None],
        read: Callable[[bool], dict[str, Any] | None],
    ) -> bool:
        """Read-modify-write of the object at ``url_path`` with a merge patch guarded by the ``resourceVersion``
        just read, so a concurrent change is read again instead of overwritten (optimistic concurrency).

        ``read(first)`` gives the object (None: gone; ``first`` on the first round); ``edit(doc)`` the patch to
        send, without ``metadata.resourceVersion`` (None: nothing to do). A 409, or a patch that may not have
        landed (no answer, 5xx), starts another round, whose read says whether it is still to do, up to
        ``RetryPolicy.conflict_attempts`` rounds. Returns False when the object is gone, True otherwise. Raises
        ``ConflictError`` after repeated conflicts and the other ``KubernetesError``s as they come.
        """
        for attempt in range(self.rest.retry.conflict_attempts):
            doc = read(attempt == 0)
            if doc is None:
                return False
            patch = edit(doc)
            if patch is None:
                return True
            patch.setdefault("metadata", {})["resourceVersion"] = (doc.get("metadata") or {}).get("resourceVersion")
            try:
                self.rest.request("PATCH", url_path, body=patch, content_type=MERGE_PATCH, what=what)
                return True
            except NotFoundError:
                return False
            except ConflictError:
                continue
            except KubernetesError as exc:
                if not may_have_applied(exc):
                    raise
        raise ConflictError(f"{what}: kept conflicting", status=409)

    def remove_finalizer(self, url_path: str, *, finalizer: str, what: str) -> None:
        """Remove ``finalizer`` from the object at ``url_path``: a merge patch of the rest of its finalizers
        (:meth:`guarded_patch`: JSON merge patch replaces the whole list, and another controller's finalizer must
        survive). Gone or without it: nothing to do. ``ConflictError`` after repeated conflicts."""

        def read(_first: bool) -> dict[str, Any] | None:
            try:
                found: dict[str, Any] = self.rest.request("GET", url_path, what=f"get {what}") or {}
                return found
            except NotFoundError:
                return None

        def edit(doc: dict[str, Any]) -> dict[str, Any] | None:
            finalizers = list((doc.get("metadata") or {}).get("finalizers") or [])
            if finalizer not in finalizers:
                return None
            return {"metadata": {"finalizers": [f for f in finalizers if f != finalizer] or None}}

        self.guarded_patch(url_path, what=f"remove {finalizer} from {what}", edit=edit, read=read)
