"""The resource types the emulator serves, and the discovery documents that describe them.

A :class:`ResourceType` names one REST collection (``pods``, ``deployments.apps``,
``nodeclaims.karpenter.sh``) with its kind, scope, subresources and the field labels a real API
server accepts in ``fieldSelector`` (``pkg/registry/core/pod/strategy.go`` ``ToSelectableFields``
and friends; other resources only select ``metadata.name`` / ``metadata.namespace``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "DEFAULT_RESOURCES",
    "Registry",
    "ResourceType",
]

_META_FIELDS = ("metadata.name", "metadata.namespace")
_RW_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST collection.

    ``key`` is ``plural`` for the core group and ``plural.group`` otherwise (``kubectl`` style).
    ``custom`` marks a CustomResourceDefinition: strategic merge patch is refused (415) and
    ``status`` is dropped on create, as for a CRD with the status subresource.
    ``selectable_fields`` maps each accepted ``fieldSelector`` label to the dotted path it reads.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ("status",)
    custom: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    selectable_fields: dict[str, str] = field(default_factory=lambda: {f: f for f in _META_FIELDS})

    @property
    def key(self) -> str:
        """``pods`` or ``plural.group``: the name used by the in-process store API."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def has_status(self) -> bool:
        """True when ``status`` is a subresource: main-resource writes keep the stored status."""
        return "status" in self.subresources

    def discovery(self) -> list[dict[str, Any]]:
        """``APIResource`` entries for this type and its subresources (``/api/v1``, ``/apis/g/v``)."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(_RW_VERBS),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        for sub in self.subresources:
            kind = {"eviction": "Eviction", "binding": "Binding"}.get(sub, self.kind)
            verbs = ["create"] if sub in ("eviction", "binding") else ["get", "patch", "update"]
            entry: dict[str, Any] = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
            if sub == "scale":
                # the API server names the Scale's own group and version (autoscaling/v1), as kubectl's scale client
                # reads them from discovery (k8s.io/client-go scale NewDiscoveryScaleKindResolver)
                entry.update(kind="Scale", group="autoscaling", version="v1")
            if sub == "eviction":
                # kubectl drain evicts only when discovery names the Eviction's group and version
                # (k8s.io/kubectl pkg/drain CheckEvictionSupport); otherwise it deletes the pods.
                entry.update(group="policy", version="v1")
            out.append(entry)
        return out


def _fields(*extra: str, **renamed: str) -> dict[str, str]:
    out = {f: f for f in (*_META_FIELDS, *extra)}
    out.update(renamed)
    return out


DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("status", "binding", "eviction"),
        short_names=("po",),
        categories=("all",),
        selectable_fields=_fields(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    ResourceType(
        "", "v1", "nodes", "Node", False, short_names=("no",), selectable_fields=_fields("spec.unschedulable")
    ),
    ResourceType(
        "", "v1", "namespaces", "Namespace", False, short_names=("ns",), selectable_fields=_fields("status.phase")
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        (),
        short_names=("ev",),
        selectable_fields=_fields(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
            source="source.component",
        ),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, (), short_names=("cm",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, short_names=("pvc",)),
    ResourceType("", "v1", "persistentvolumes", "PersistentVolume", False, short_names=("pv",)),
    ResourceType("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, (), short_names=("sc",)),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("status", "scale"),
        short_names=("deploy",),
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("status", "scale"),
        short_names=("rs",),
        categories=("all",),
        selectable_fields=_fields("status.replicas"),
    ),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, short_names=("ds",), categories=("all",)),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("status", "scale"),
        short_names=("sts",),
        categories=("all",),
    ),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, short_names=("pdb",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, ()),
    # names, short names and categories as in Karpenter's CRDs (pkg/apis/crds); "all" as upstream's workloads
    ResourceType(
        "karpenter.sh",
        "v1",
        "nodepools",
        "NodePool",
        False,
        ("status", "scale"),
        custom=True,
        categories=("karpenter",),
    ),
    ResourceType("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False, custom=True, categories=("karpenter",)),
    ResourceType(
        "karpenter.k8s.aws",
        "v1",
        "ec2nodeclasses",
        "EC2NodeClass",
        False,
        custom=True,
        short_names=("ec2nc", "ec2ncs"),
        categories=("karpenter",),
    ),
    ResourceType(
        "karpenter.sh",
        "v1alpha1",
        "nodeoverlays",
        "NodeOverlay",
        False,
        custom=True,
        short_names=("overlays",),
        categories=("karpenter",),
    ),
)
"""What the emulator serves by default: core, apps, policy, coordination, storage and Karpenter's CRDs."""


class Registry:
    """Resource types by key (``pods``), by REST coordinates and by ``apiVersion``/``kind``."""

    def __init__(self, types: Iterable[ResourceType] = DEFAULT_RESOURCES) -> None:
        self._by_key: dict[str, ResourceType] = {}
        self._by_rest: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for rt in types:
            self.register(rt)

    def register(self, rt: ResourceType) -> None:
        """Add (or replace) a resource type, for example an extra CRD a scenario needs."""
        self._by_key[rt.key] = rt
        self._by_rest[(rt.group, rt.version, rt.plural)] = rt
        self._by_kind[(rt.api_version, rt.kind)] = rt

    def get(self, key: str) -> ResourceType:
        """The type for ``key`` (``pods``, ``nodeclaims.karpenter.sh``); KeyError names it if unknown."""
        try:
            return self._by_key[key]
        except KeyError:
            raise KeyError(f"unknown resource {key!r}; known: {sorted(self._by_key)}") from None

    def by_rest(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/api(s)/[group/]version/plural``, or None."""
        return self._by_rest.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The type of a manifest with ``apiVersion`` and ``kind``, or None."""
        return self._by_kind.get((api_version, kind))

    def __iter__(self) -> Any:
        return iter(self._by_key.values())

    def groups(self) -> dict[str, list[str]]:
        """Group name to its versions (the core group is ``""``)."""
        out: dict[str, list[str]] = {}
        for rt in self._by_key.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def api_versions(self) -> dict[str, Any]:
        """``/api``: the core group's ``APIVersions``."""
        return {"kind": "APIVersions", "versions": self.groups().get("", ["v1"]), "serverAddressByClientCIDRs": []}

    def api_group(self, group: str) -> dict[str, Any] | None:
        """``/apis/<group>``: one ``APIGroup``, or None if unknown."""
        versions = self.groups().get(group)
        if not group or versions is None:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": gvs, "preferredVersion": gvs[0]}

    def api_group_list(self) -> dict[str, Any]:
        """``/apis``: every non-core group."""
        groups = [g for name in self.groups() if name and (g := self.api_group(name)) is not None]
        for g in groups:
            g.pop("kind")
            g.pop("apiVersion")
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        """``/api/v1`` or ``/apis/<group>/<version>``: an ``APIResourceList``, or None if unknown."""
        types = [rt for rt in self._by_key.values() if rt.group == group and rt.version == version]
        if not types:
            return None
        resources = [entry for rt in types for entry in rt.discovery()]
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
