"""The shipped ClusterRole grants exactly the (API group, resource, verb) triples Nodesmith's Kubernetes adapter
(``lambdas/nodesmith/adapters/kube/``) sends, and the adapter sends nothing outside them.

The verbs follow the HTTP method: GET of one object is ``get``, GET of a collection ``list``, a watch
``watch``, POST ``create``, PATCH ``patch``, PUT ``update``, DELETE ``delete``. NodeClaim status is written with
a PUT of the status subresource (``update``); every other write is a PATCH, so neither nodes nor NodeClaims
need ``update``. Node leases (``coordination.k8s.io``) are never read.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "infra" / "rbac" / "nodesmith-clusterrole.yaml"
KUBE_ADAPTER = REPO / "lambdas" / "nodesmith" / "adapters" / "kube"

GRANTS = {
    ("", "pods", "list"),  # the reconcile snapshot; a drain round's pods (fieldSelector spec.nodeName)
    ("", "pods", "watch"),  # the reconcile function's cache; pending pods in watch mode
    ("", "pods", "delete"),  # a pod past its deadline
    ("", "pods/eviction", "create"),  # drains, PodDisruptionBudgets honoured
    ("", "nodes", "get"),  # locate an interrupted or terminating node
    ("", "nodes", "list"),  # the snapshot; the cordoned nodes (fieldSelector spec.unschedulable)
    ("", "nodes", "watch"),  # the reconcile function's cache
    ("", "nodes", "patch"),  # taint and cordon, uncordon, labels and finalizers
    ("", "nodes", "delete"),  # a terminated node
    ("", "events", "create"),  # Events on pods, nodes and NodeClaims
    ("karpenter.sh", "nodepools", "list"),
    ("karpenter.sh", "nodepools", "watch"),  # the reconcile function's cache
    ("karpenter.k8s.aws", "ec2nodeclasses", "get"),  # re-read before a guarded finalizer patch
    ("karpenter.k8s.aws", "ec2nodeclasses", "list"),
    ("karpenter.sh", "nodeoverlays", "list"),  # feature gate NodeOverlay
    ("karpenter.sh", "nodeoverlays/status", "patch"),  # ValidationSucceeded / Ready, merge patch
    ("karpenter.k8s.aws", "ec2nodeclasses/status", "patch"),  # status.capacityReservations
    ("karpenter.k8s.aws", "ec2nodeclasses", "patch"),  # the karpenter.k8s.aws/termination finalizer only
    ("karpenter.sh", "nodeclaims", "get"),
    ("karpenter.sh", "nodeclaims", "list"),
    ("karpenter.sh", "nodeclaims", "watch"),  # the reconcile function's cache
    ("karpenter.sh", "nodeclaims", "create"),
    ("karpenter.sh", "nodeclaims", "patch"),  # labels, termination annotations, finalizer removal
    ("karpenter.sh", "nodeclaims", "delete"),  # a termination request
    ("karpenter.sh", "nodeclaims/status", "update"),  # PUT of the status subresource
    ("apps", "daemonsets", "list"),
    ("policy", "poddisruptionbudgets", "list"),
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumes", "list"),
    ("storage.k8s.io", "storageclasses", "list"),
}


def _grants() -> set[tuple[str, str, str]]:
    role = next(d for d in yaml.safe_load_all(ROLE.read_text()) if d["kind"] == "ClusterRole")
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_the_cluster_role_grants_exactly_what_the_adapter_uses() -> None:
    assert _grants() == GRANTS


def test_every_kind_the_reconcile_cache_keeps_may_be_watched() -> None:
    """The informers of ``KubeCluster.follow`` and ``KubeCluster.catch_up`` list and watch their collections: a watch
    the role refused would leave the cache listing every pass (or, followed, not serving)."""
    from kubernetes.client import ApiClient

    from nodesmith.adapters.kube import KubeCluster

    informers = KubeCluster(api_client=ApiClient())._informers_of()
    paths = [i.url_path for i in informers.values()]
    assert len(paths) == 4
    for url in paths:
        parts = url.strip("/").split("/")  # /api/v1/<plural> or /apis/<group>/<version>/<plural>
        group, plural = ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])
        assert {(group, plural, "list"), (group, plural, "watch")} <= _grants(), url


def test_the_adapter_sends_no_method_the_cluster_role_would_refuse() -> None:
    source = "\n".join(p.read_text() for p in sorted(KUBE_ADAPTER.glob("*.py")))
    methods = set(re.findall(r'"(GET|POST|PUT|PATCH|DELETE)",?\s', source))
    assert methods == {"GET", "POST", "PUT", "PATCH", "DELETE"}
    # The only PUT is the NodeClaim status subresource.
    assert source.count('"PUT"') == 1
    put = source.index('"PUT"')
    assert '"status"' in source[put : put + 200]
    assert "coordination.k8s.io" not in source and "leases" not in source


def test_users_keep_their_nodepools_and_ec2nodeclasses() -> None:
    """NodePools are never written; EC2NodeClasses only patched, for the finalizer Karpenter's AWS provider puts on
    them (a merge patch of ``metadata.finalizers``), never created, replaced or deleted."""
    writes = {"create", "update", "patch", "delete"}
    owned_by_users = {
        ("karpenter.sh", "nodepools"),
        ("karpenter.k8s.aws", "ec2nodeclasses"),
        ("karpenter.sh", "nodeoverlays"),
    }
    written = {(g, r, v) for g, r, v in _grants() if (g, r) in owned_by_users and v in writes}
    assert written == {("karpenter.k8s.aws", "ec2nodeclasses", "patch")}
    source = (KUBE_ADAPTER / "karpenter_objects.py").read_text()
    patches = re.findall(r'"ec2nodeclasses", name\)', source)
    assert len(patches) == 2  # the finalizer's add and removal, nothing else addresses one EC2NodeClass


def test_the_security_docs_list_what_the_cluster_role_grants() -> None:
    """docs/security.md's RBAC table (resource, verbs) says what the shipped role grants, no more and no less."""
    doc = (REPO / "docs" / "security.md").read_text()
    table = doc[doc.index("| resource | verbs | why |") :].split("\n\n", 1)[0].splitlines()[2:]
    documented = set()
    for row in table:
        resources, verbs = (cell.strip() for cell in row.strip("|").split("|")[:2])
        documented |= {(r.strip(), v.strip()) for r in resources.split(",") for v in verbs.split(",")}
    assert documented == {(resource, verb) for _, resource, verb in _grants()}
