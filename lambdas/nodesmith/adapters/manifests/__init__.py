"""Load Kubernetes/Karpenter manifests (multi-document YAML) into core types.

``load_manifests(paths)`` reads one or many files (a directory means its ``*.yaml``/``*.yml``
files, sorted) and returns a :class:`ManifestBundle`: NodePools, EC2NodeClasses, NodeClaims
(pydantic models with Karpenter's defaults), and Pods, DaemonSets, Nodes and PodDisruptionBudgets
(core dataclasses). Workloads are expanded into the pods their controllers would create:

* ``Deployment`` -> one ReplicaSet ``<name>-<hash>`` -> ``replicas`` pods ``<rs>-<suffix>``;
* ``ReplicaSet`` -> ``replicas`` pods ``<name>-<suffix>``;
* ``StatefulSet`` -> pods ``<name>-0`` .. ``<name>-<n-1>`` with claims ``<template>-<pod>``;
* ``Job`` -> ``min(parallelism, completions)`` pods ``<name>-<suffix>`` (0 when suspended).

Names and uids are deterministic (hashes of namespace, name and index), so two loads agree; a
Pod document without ``metadata.uid`` gets one the same way.
Expanded pods, and Pod documents written without a ``status``, are pending and marked
unschedulable (``PodScheduled=False, reason=Unschedulable``) unless they set ``spec.nodeName``.
``List`` documents (``kubectl get -o yaml``) are unpacked. Unknown kinds are recorded in
``ManifestBundle.ignored``.

Errors: any invalid document rejects its whole file with :class:`~nodesmith.core.errors.ManifestError`
whose message names the file, the 1-based document number, the kind/name when known, the field path
(``spec.template.spec.requirements[0].operator``) and the reason.

The loader lives by concern: :mod:`.loader` (entry points, YAML reading, error messages),
:mod:`.bundle` (:class:`ManifestBundle`), :mod:`.kinds` (one handler per kind) and :mod:`.workloads`
(expanding controllers into pods). This package re-exports the public names.
"""

from __future__ import annotations

from nodesmith.adapters.manifests.bundle import IgnoredDocument, ManifestBundle
from nodesmith.adapters.manifests.loader import load_manifest_file, load_manifest_text, load_manifests

__all__ = [
    "IgnoredDocument",
    "ManifestBundle",
    "load_manifest_file",
    "load_manifest_text",
    "load_manifests",
]
