"""Termination: how a node leaves the cluster, whoever asked for it to go.

Owns Karpenter's termination flow (``karpenter-v1.md`` §3.7) for interruptions, expiration, drift,
emptiness, consolidation and user deletions alike, so there is one drain implementation:

* :mod:`.requests`: asking for a termination (annotate and delete the NodeClaim, whose
  ``karpenter.sh/termination`` finalizer keeps it; the request to send to the termination queue) and
  finishing one (terminate the instance, delete the Node, remove the finalizers);
* :mod:`.drain`: one drain round on a cordoned node (Eviction API, PodDisruptionBudgets, tiers,
  force-deletion at the deadline);
* :mod:`.service`: the termination function's use case, one round per delivery of a request, everything
  re-read from the cluster and EC2 first.
"""
