"""Provisioning: capacity for pending pods, and the NodeClaims it launches, from pod to Ready node.

Owns the reconcile pass (:mod:`.reconcile`): the cluster snapshot (:mod:`.inputs`) and its view of
pending pods and existing capacity (:mod:`.capacity`), the NodeClaims it builds and launches
(:mod:`.nodeclaims`, :mod:`.launch`), their lifecycle after launch (:mod:`.lifecycle`: registration,
initialization, liveness, garbage collection), what a pass reports (:mod:`.outcome`, :mod:`.utilization`),
and the reconcile lease and watch mode that decide when passes run (:mod:`.leases`, :mod:`.watch`,
:mod:`.pod_watch`).
"""
