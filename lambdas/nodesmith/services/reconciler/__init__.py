"""The reconcile function's passes as a warm container runs them, one after another, with what it keeps between them.

* :mod:`.container`: :class:`~.container.WarmContainer`, the state a container keeps from pass to pass (the kept
  existing capacity, garbage collection's cadence and fleet listing, the disruption pass's pending commands,
  rejection Events and consolidation memory) and the provisioning and disruption passes run with it;
* :mod:`.watching`: watch mode (one invocation reacting to pending pods for most of its lifetime, under the
  reconcile lease) and a wake's burst of passes, around :mod:`nodesmith.services.provisioning.watch`'s batcher.

The passes themselves are :mod:`nodesmith.services.provisioning` and :mod:`nodesmith.services.disruption`'s; the
reconcile handler decides which run when (a schedule tick, a watching invocation, a wake) and reports them.
"""
