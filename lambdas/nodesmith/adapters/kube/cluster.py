"""``KubeCluster``: the :class:`nodesmith.core.ports.Cluster` port over the official Kubernetes client.

Calls go through :class:`~nodesmith.adapters.kube.calls.KubeRest` (the client's ``ApiClient``
without its slow-to-import generated API classes). Reads parse raw JSON with the core parsers
(:mod:`nodesmith.core.objects`, the CRD models of :mod:`nodesmith.core.api`); writes are JSON
merge patches, guarded by ``resourceVersion`` where a whole list is replaced (taints). Every
failure is a :mod:`nodesmith.core.errors` type.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.kube.calls import STRATEGIC_MERGE_PATCH, KubeRest, path
from nodesmith.adapters.kube.parsed import ParsedObjects
from nodesmith.adapters.kube.watches import PodWatches
from nodesmith.core.drain import CORDONED_ANNOTATION
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError
from nodesmith.core.objects import daemonset_from_dict, node_from_dict, pdb_from_dict, pod_from_dict

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from kubernetes.client import ApiClient

    from nodesmith.adapters.kube.informer import Informer
    from nodesmith.adapters.kube.retry import RetryPolicy
    from nodesmith.core.model import DaemonSet, Node, Pod, PodDisruptionBudget, Taint
    from nodesmith.core.ports import EvictionOutcome, ObjectRef
    from nodesmith.core.scheduling.volumes import VolumeContext

__all__ = ["KubeCluster"]

log = logging.getLogger(__name__)

_EVENT_MESSAGE_MAX = 1024


def _taint_dict(taint: Taint) -> dict[str, str]:
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


_READ_REUSE_SECONDS = 10.0
"""How long a node document read by ``get_node`` may stand in for the GET before a guarded patch (seconds)."""
_READ_REUSE_MAX = 4096
"""Node documents kept for reuse at most (a warm container's cache is cleared past this)."""


class KubeCluster(PodWatches):
    """The Kubernetes side of Nodesmith (implements :class:`nodesmith.core.ports.Cluster`).

    ``api_client`` comes from :func:`nodesmith.adapters.kube.client.build_api_client`.
    ``request_timeout`` is (connect, read) seconds per call; ``page_size`` bounds list pages;
    ``component`` is the Event source; ``clock`` gives epoch seconds for Event timestamps; ``retry`` bounds
    the retries of refused requests and the re-reads of guarded writes
    (:class:`~nodesmith.adapters.kube.retry.RetryPolicy`, its defaults when None). With ``list_from_watch_cache``
    the snapshot's lists of pods, Nodes, DaemonSets, PodDisruptionBudgets, NodePools and EC2NodeClasses ask for
    ``resourceVersion=0`` (the API server's watch cache, as an informer lists; pages of ``page_size``); NodeClaims,
    which the passes themselves create and must read back, and selected lists (a node's pods, the cordoned
    nodes) are read at the latest version. The kept cache (:meth:`follow`, :meth:`catch_up`) lists again, rather than
    watching to a bookmark, a kind that holds fewer than ``relist_below`` objects (a page, by default).
    All methods take keyword arguments and raise :mod:`nodesmith.core.errors` types.
    """

    def __init__(
        self,
        *,
        api_client: ApiClient,
        request_timeout: tuple[float, float] = (5.0, 30.0),
        page_size: int = 500,
        component: str = "nodesmith",
        clock: Callable[[], float] = time.time,
        retry: RetryPolicy | None = None,
        list_from_watch_cache: bool = True,
        relist_below: int = 500,
    ) -> None:
        self.rest = KubeRest(api_client, timeout=request_timeout, retry=retry)
        self.list_from_watch_cache = list_from_watch_cache
        self.page_size = page_size
        self.relist_below = relist_below
        self.component = component
        self.clock = clock
        self._read_nodes: dict[str, tuple[float, dict[str, Any]]] = {}
        self._read_lock = threading.Lock()
        self._pods: ParsedObjects[Pod] = ParsedObjects(pod_from_dict)
        self._nodes: ParsedObjects[Node] = ParsedObjects(node_from_dict)
        self._informers: dict[str, Informer[Any]] = {}
        self._kept: dict[str, Informer[Any]] = {}
        self._following = False

    # ----------------------------------------------------------------- watch mode's cache, poll mode's kept cache
    def _informers_of(self) -> dict[str, Informer[Any]]:
        """An informer each for pods, Nodes, NodeClaims and NodePools (each keeps its parses itself). NodeClaims,
        which the passes create and must read back, are first listed at the latest version, as without the cache."""
        from nodesmith.adapters.kube.informer import Informer, Listing
        from nodesmith.core.api.nodeclaim import NodeClaim

        def claim(item: Mapping[str, Any]) -> NodeClaim:
            parsed: NodeClaim = self._parse(NodeClaim.model_validate, item, "nodeclaim")
            return parsed

        kinds: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
            "pods": (path("api", "v1", "pods"), lambda i: self._parse(pod_from_dict, i, "pod")),
            "nodes": (path("api", "v1", "nodes"), lambda i: self._parse(node_from_dict, i, "node")),
            "nodeclaims": (path("apis", "karpenter.sh", "v1", "nodeclaims"), claim),
            "nodepools": (path("apis", "karpenter.sh", "v1", "nodepools"), self._nodepool_or_none),
        }
        return {
            kind: Informer(
                rest=self.rest,
                url_path=url,
                what=kind,
                parse=parse,
                listing=Listing(
                    page_size=self.page_size,
                    cache_first=self.list_from_watch_cache and kind != "nodeclaims",
                    relist_below=self.relist_below,
                ),
            )
            for kind, (url, parse) in kinds.items()
        }

    def _kept_informers(self) -> dict[str, Informer[Any]]:
        """The informers this cluster keeps for its whole life (a Lambda container's), made the first time."""
        if not self._kept:
            self._kept = self._informers_of()
        return self._kept

    def follow(self, *, wait_seconds: float = 10.0) -> bool:
        """Keep pods, Nodes, NodeClaims and NodePools in memory (:class:`~nodesmith.adapters.kube.informer.Informer`:
        one list each, then their watches, relisting after a 410 Gone) until :meth:`unfollow`; meanwhile the
        lists of those kinds (all pods, not a node's) read memory, and NodeClaims this process writes are taken in
        at once. The informers are kept after :meth:`unfollow`: the next :meth:`follow` (a container's next watching
        invocation) or :meth:`catch_up` reads only what changed since. True when every kind was current within
        ``wait_seconds``; a kind that was not (or whose informer breaks) is listed from the API as before. Watch
        mode follows for the invocation's lifetime."""
        kept = self._kept_informers()
        self._following = True
        self._pods.clear()  # the informers hold every pod; only a node's pods are parsed through it now
        self._informers = kept
        for informer in kept.values():  # every one at once, then wait for them
            informer.start(wait_seconds=0)
        deadline = time.monotonic() + wait_seconds
        started = [i.start(wait_seconds=max(deadline - time.monotonic(), 0.0)) for i in kept.values()]
        return all(started)

    def unfollow(self) -> None:
        """Stop the informers of :meth:`follow` (their threads end; what they hold is kept); lists read the API
        again."""
        self._following = False
        self._informers = {}
        for informer in self._kept.values():
            informer.stop()

    def catch_up(self) -> list[str]:
        """Poll mode's kept cache: bring pods, Nodes, NodeClaims and NodePools to the present and serve their lists
        from memory until :meth:`hold`, as :meth:`follow` does but without threads left running, for a container
        that is frozen between invocations. The first call lists each kind (``resourceVersion=0``, in pages); later
        ones read only what changed since (:meth:`Informer.catch_up
        <nodesmith.adapters.kube.informer.Informer.catch_up>`: a short watch from the kept version, to the API
        server's bookmark; a list again after a 410 Gone or a watch that ends without a bookmark). The kinds are
        caught up at once, in threads. Returns what went wrong, a line each: a kind listed again because its watch
        failed (``"<kind>: listed again: <why>"``), or one whose list failed too (``"<kind>: not caught up, ..."``),
        which the pass lists from the API, as without the cache. Does nothing while :meth:`follow` follows."""
        if self._following:
            return []
        kept = self._kept_informers()
        self._pods.clear()  # the kept cache holds every pod; only a node's pods are parsed through it now
        with ThreadPoolExecutor(max_workers=len(kept), thread_name_prefix="catch-up") as pool:
            done = {kind: pool.submit(informer.catch_up) for kind, informer in kept.items()}
        failures = []
        for kind, future in done.items():
            try:
                if future.result() == "listed" and kept[kind].failure:
                    failures.append(f"{kind}: listed again: {kept[kind].failure}")
            except KubernetesError as exc:
                failures.append(f"{kind}: not caught up, the pass lists it: {exc}")
        self._informers = kept
        return failures

    def hold(self) -> None:
        """End :meth:`catch_up`'s serving: lists read the API until the next catch-up, which starts from what is
        kept."""
        if self._following:
            return
        self._informers = {}
        for informer in self._kept.values():
            informer.hold()

    # ----------------------------------------------------------------- snapshot reads
    def list_pods(self, *, node_name: str | None = None) -> list[Pod]:
        """All pods, or those bound to ``node_name`` (field selector ``spec.nodeName``).

        A pod listed at a ``resourceVersion`` already parsed is not parsed again (:mod:`.parsed`)."""
        selector = f"spec.nodeName={node_name}" if node_name else None
        followed = self._followed("pods") if selector is None else None
        if followed is not None:
            return followed
        items = self._list(path("api", "v1", "pods"), what="list pods", cached=selector is None, fieldSelector=selector)
        pods = [self._parse(self._pods, i, "pod") for i in items]
        if selector is None:
            self._pods.keep_only(items)
        return pods

    def list_nodes(self) -> list[Node]:
        """All nodes (a node listed at a ``resourceVersion`` already parsed is not parsed again)."""
        followed = self._followed("nodes")
        if followed is not None:
            return followed
        items = self._list(path("api", "v1", "nodes"), what="list nodes", cached=True)
        nodes = [self._parse(self._nodes, i, "node") for i in items]
        self._nodes.keep_only(items)
        return nodes

    def cordoned_node_names(self) -> set[str]:
        """The names of the cordoned nodes: one list with the field selector ``spec.unschedulable=true``."""
        items = self._list(
            path("api", "v1", "nodes"), what="list cordoned nodes", fieldSelector="spec.unschedulable=true"
        )
        return {str((i.get("metadata") or {}).get("name") or "") for i in items} - {""}

    def list_daemonsets(self) -> list[DaemonSet]:
        """All DaemonSets as template pods."""
        items = self._list(path("apis", "apps", "v1", "daemonsets"), what="list daemonsets", cached=True)
        return [self._parse(daemonset_from_dict, i, "daemonset") for i in items]

    def list_pdbs(self) -> list[PodDisruptionBudget]:
        """All PodDisruptionBudgets (with ``status.disruptionsAllowed`` when the controller set it)."""
        items = self._list(
            path("apis", "policy", "v1", "poddisruptionbudgets"), what="list poddisruptionbudgets", cached=True
        )
        return [self._parse(pdb_from_dict, i, "poddisruptionbudget") for i in items]

    def volume_context(self) -> VolumeContext:
        """Every PersistentVolumeClaim, PersistentVolume and StorageClass, for volume topology.

        Three lists (``persistentvolumeclaims`` and ``persistentvolumes`` in core/v1,
        ``storageclasses`` in storage.k8s.io/v1); an unreadable object raises ``KubernetesError``.
        """
        from nodesmith.core.objects.volumes import (
            persistent_volume_from_dict,
            storage_class_from_dict,
            volume_claim_from_dict,
        )
        from nodesmith.core.scheduling.volumes import VolumeContext

        claims = self._list(path("api", "v1", "persistentvolumeclaims"), what="list persistentvolumeclaims")
        volumes = self._list(path("api", "v1", "persistentvolumes"), what="list persistentvolumes")
        classes = self._list(path("apis", "storage.k8s.io", "v1", "storageclasses"), what="list storageclasses")
        return VolumeContext.of(
            claims=[self._parse(volume_claim_from_dict, i, "persistentvolumeclaim") for i in claims],
            volumes=[self._parse(persistent_volume_from_dict, i, "persistentvolume") for i in volumes],
            classes=[self._parse(storage_class_from_dict, i, "storageclass") for i in classes],
        )

    # ----------------------------------------------------------------- nodes
    def _node_json(self, name: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = self.rest.request("GET", path("api", "v1", "nodes", name), what=f"get node {name}")
        except NotFoundError:
            return None
        return doc

    def get_node(self, *, name: str) -> Node | None:
        """One node by name, or None.

        The document read is kept for :data:`_READ_REUSE_SECONDS` so that a write right after (the
        interruption handler locates a node, then taints and cordons it) can patch it without a second
        GET: such a patch is guarded by the read's ``resourceVersion``, so a node changed since is a
        409 and the write re-reads it.
        """
        doc = self._node_json(name)
        if doc is None:
            return None
        with self._read_lock:
            if len(self._read_nodes) >= _READ_REUSE_MAX:
                self._read_nodes.clear()
            self._read_nodes[name] = (time.monotonic(), doc)
        node: Node = self._parse(self._nodes, doc, "node")
        return node

    def _node_for_write(self, name: str, *, first: bool) -> dict[str, Any] | None:
        """The node to patch: on the first try the document :meth:`get_node` read in the last few seconds
        (used once), else a fresh GET."""
        if first:
            with self._read_lock:
                read = self._read_nodes.pop(name, None)
            if read is not None and time.monotonic() - read[0] <= _READ_REUSE_SECONDS:
                return read[1]
        return self._node_json(name)

    def taint_and_cordon(self, *, node_name: str, taint: Taint | None) -> bool:
        """Add ``taint`` (once: same key and effect; None: no taint, a plain cordon) and set ``spec.unschedulable``;
        False if the node is gone. When the node was not cordoned yet it is annotated
        :data:`~nodesmith.core.drain.CORDONED_ANNOTATION`, so :meth:`untaint_and_uncordon` knows the cordon is ours.

        The taints list is replaced by a ``resourceVersion``-guarded merge patch (:meth:`guarded_patch`), so a
        concurrent change is read again instead of overwritten. Raises ``ConflictError`` after repeated conflicts.
        """

        def edit(doc: dict[str, Any]) -> dict[str, Any] | None:
            spec = doc.get("spec") or {}
            taints = list(spec.get("taints") or [])
            present = taint is None or any((t.get("key"), t.get("effect")) == (taint.key, taint.effect) for t in taints)
            if present and spec.get("unschedulable") is True:
                return None
            if taint is not None and not present:
                taints.append(_taint_dict(taint))
            patch: dict[str, Any] = {"spec": {"taints": taints, "unschedulable": True}}
            if spec.get("unschedulable") is not True:  # the cordon is ours: say so, for untaint_and_uncordon
                patch["metadata"] = {"annotations": {CORDONED_ANNOTATION: "true"}}
            return patch

        return self._patch_node(node_name, what=f"taint and cordon node {node_name}", edit=edit)

    def untaint_and_uncordon(self, *, node_name: str, taint_key: str) -> bool:
        """Remove the taints keyed ``taint_key`` and, when :meth:`taint_and_cordon` set it (the node carries
        :data:`~nodesmith.core.drain.CORDONED_ANNOTATION`), ``spec.unschedulable`` and that annotation; False if the
        node is gone. A cordon that was there before Nodesmith's stays.

        Same guarded merge patch as :meth:`taint_and_cordon` (``ConflictError`` after repeated conflicts).
        Nothing is written when there is nothing to undo.
        """

        def edit(doc: dict[str, Any]) -> dict[str, Any] | None:
            spec = doc.get("spec") or {}
            taints = list(spec.get("taints") or [])
            kept = [t for t in taints if t.get("key") != taint_key]
            ours = CORDONED_ANNOTATION in ((doc.get("metadata") or {}).get("annotations") or {})
            if len(kept) == len(taints) and not ours:
                return None
            patch: dict[str, Any] = {"spec": {"taints": kept or None}}
            if ours:
                patch["spec"]["unschedulable"] = None
                patch["metadata"] = {"annotations": {CORDONED_ANNOTATION: None}}
            return patch

        return self._patch_node(node_name, what=f"untaint and uncordon node {node_name}", edit=edit)

    def _patch_node(self, name: str, *, what: str, edit: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
        """:meth:`guarded_patch` of the node ``name``, its first read the one :meth:`get_node` just made."""

        def read(first: bool) -> dict[str, Any] | None:
            return self._node_for_write(name, first=first)

        return self.guarded_patch(path("api", "v1", "nodes", name), what=what, edit=edit, read=read)

    def label_node(self, *, node_name: str, labels: Mapping[str, str], finalizers: Sequence[str] = ()) -> None:
        """Merge ``labels`` into the node's labels and add ``finalizers`` (a strategic merge patch: a Node's
        finalizers merge as a set, so another controller's stay); ``NotFoundError`` if the node is gone."""
        meta: dict[str, Any] = {"labels": dict(labels)}
        if finalizers:
            meta["finalizers"] = list(finalizers)
        self.rest.request(
            "PATCH",
            path("api", "v1", "nodes", node_name),
            body={"metadata": meta},
            content_type=STRATEGIC_MERGE_PATCH,
            what=f"label node {node_name}",
        )

    def delete_node(self, *, name: str) -> None:
        """DELETE a Node object (one with finalizers stays, deleting); already gone is fine."""
        try:
            self.rest.request("DELETE", path("api", "v1", "nodes", name), what=f"delete node {name}")
        except NotFoundError:
            return

    def remove_node_finalizer(self, *, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` from the Node (a guarded merge patch, :meth:`remove_finalizer`)."""
        self.remove_finalizer(path("api", "v1", "nodes", name), finalizer=finalizer, what=f"node {name}")

    # ----------------------------------------------------------------- pods
    @staticmethod
    def _delete_options(pod: Pod, grace_period_seconds: int | None) -> dict[str, Any]:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if pod.uid:
            options["preconditions"] = {"uid": pod.uid}
        return options

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> EvictionOutcome:
        """Evict through ``policy/v1`` Eviction: 'evicted', 'blocked' (429, a PodDisruptionBudget), 'gone' (404).

        The pod's uid is a precondition, so a same-named replacement (409) also counts as 'gone'. An eviction
        is safe to send again (a repeat of one that landed finds the pod gone or terminating), so throttling,
        server errors and lost answers are retried; a budget's 429 is not. Other failures (500 when several
        budgets select the pod, after its retries) raise ``KubernetesError``.
        """
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": self._delete_options(pod, grace_period_seconds),
        }
        try:
            self.rest.request(
                "POST",
                path("api", "v1", "namespaces", pod.namespace, "pods", pod.name, "eviction"),
                body=body,
                what=f"evict pod {pod.key}",
                repeatable=True,
            )
        except (NotFoundError, ConflictError):
            return "gone"
        except KubernetesError as exc:
            if exc.status == 429:
                return "blocked"
            raise
        return "evicted"

    def delete_pod(self, *, pod: Pod, grace_period_seconds: int | None = None) -> None:
        """Delete a pod directly (no PodDisruptionBudget check); gone or replaced is fine."""
        try:
            self.rest.request(
                "DELETE",
                path("api", "v1", "namespaces", pod.namespace, "pods", pod.name),
                body=self._delete_options(pod, grace_period_seconds),
                what=f"delete pod {pod.key}",
            )
        except (NotFoundError, ConflictError):
            return

    # ----------------------------------------------------------------- events
    def record_event(self, *, ref: ObjectRef, reason: str, message: str, type_: str = "Normal") -> None:
        """Post a ``core/v1`` Event about ``ref`` (in its namespace, ``default`` for cluster objects).

        Best effort: a failure is logged, never raised.
        """
        namespace = ref.namespace or "default"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        involved: dict[str, Any] = {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.uid:
            involved["uid"] = ref.uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:_EVENT_MESSAGE_MAX],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.rest.create(
                path("api", "v1", "namespaces", namespace, "events"),
                body=body,
                what=f"record event {reason} on {ref.kind} {ref.name}",
                same=None,  # the name's random suffix is this Event's alone
            )
        except KubernetesError as exc:
            log.warning("event not recorded: %s", exc)
