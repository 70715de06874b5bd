"""Pure parsers from Kubernetes JSON objects (as the API returns them or YAML spells them) to core types.

``pod_from_dict``, ``node_from_dict``, ``daemonset_from_dict`` and ``pdb_from_dict`` take plain
dicts (``json.loads`` of an API object, a YAML document, or ``ApiClient.sanitize_for_serialization``
of a client object) and return the frozen dataclasses of :mod:`nodesmith.core.model`. Quantities
become integers (cpu millicores, memory bytes, counts), timestamps become epoch seconds.

Errors: :class:`ObjectParseError` (a ``ValueError``) whose ``field`` is the path of the offending
field, e.g. ``spec.containers[0].resources.requests.cpu``; callers add the file/document context
(see ``nodesmith.adapters.manifests``, which turns it into :class:`~nodesmith.core.errors.ManifestError`).

The parsers live by concern: :mod:`.common` (errors, field readers, timestamps, label selectors),
:mod:`.pods` (``PodRequests``, affinity, topology spread), :mod:`.nodes`, and :mod:`.workloads`
(DaemonSets, PodDisruptionBudgets). This package re-exports their public names.
"""

from __future__ import annotations

from nodesmith.core.objects.common import ObjectParseError, label_selector_from_dict, parse_timestamp
from nodesmith.core.objects.nodes import node_from_dict
from nodesmith.core.objects.pods import MIRROR_POD_ANNOTATION, pod_from_dict, pod_requests
from nodesmith.core.objects.workloads import daemonset_from_dict, pdb_from_dict

__all__ = [
    "MIRROR_POD_ANNOTATION",
    "ObjectParseError",
    "daemonset_from_dict",
    "label_selector_from_dict",
    "node_from_dict",
    "parse_timestamp",
    "pdb_from_dict",
    "pod_from_dict",
    "pod_requests",
]
