"""Use cases, one sub-package per capability; each takes its ports (:mod:`.ports`), never concrete clients.

* :mod:`.provisioning`: the reconcile pass, from pending pods to launched, registered NodeClaims;
* :mod:`.disruption`: expiration, drift, emptiness and consolidation decided and started;
* :mod:`.interruption`: EC2 and AWS Health interruption messages verified and acted on;
* :mod:`.termination`: how a node leaves, whoever asked: drain rounds, instance termination, finalizers;
* :mod:`.reconciler`: what a warm reconcile container keeps from pass to pass, and the provisioning and disruption
  passes run with it.

Shared: :mod:`.ports` (the parameter object of ports), :mod:`.parallel` (bounded ordered fan-out),
:mod:`.breakdown` (the metrics' NodePool, capacity type and reason keys).
"""
