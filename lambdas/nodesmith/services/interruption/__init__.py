"""Interruption: what to do when EC2 or AWS Health says an instance is going, or may.

Owns the interruption function's use case (:mod:`.service`): every queue message is a claim to be checked
against EC2 and the cluster before anything is done; for an instance of ours, the node is cordoned and
tainted, Karpenter's Events are posted, an interrupted spot offering is marked unavailable, a provisioning
pass is asked for, and, when the instance will not stay, its termination is requested and sent to the
termination queue (:mod:`nodesmith.services.termination`), which drains it. Nothing here drains.
"""
