"""Disruption: node repair (feature gate ``NodeRepair``), expiration, drift, emptiness and consolidation,
carried out across reconcile passes.

Owns the disruption pass (:mod:`.service`): the snapshot it decides on and the node actions its steps share
(:mod:`.run`), the commands already started (:mod:`.inflight`), expirations and the new command
(:mod:`.command`), the state stored on NodeClaims between passes (:mod:`.state`) and what a pass reports
(:mod:`.outcome`). The decisions themselves are the core's (:mod:`nodesmith.core.disruption`); the nodes it
disrupts are drained and terminated through the termination queue (:mod:`nodesmith.services.termination`).
"""
