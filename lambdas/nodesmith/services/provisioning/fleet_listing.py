"""Garbage collection's listing of the fleet, kept across the passes of one long-lived invocation.

Garbage collection's instance-gone check and orphan sweep need every live instance of ours
(``cloud.list_instances()``: DescribeInstances of the whole fleet, seconds for thousands of instances). A scheduled
pass lists the fleet alongside its own work and waits for the listing before it ends. A watching invocation or a
wake runs pass after pass: there, once the container has collected (its first collection waits, see
:func:`~nodesmith.handlers.reconcile.run_pass`), the listing runs in a thread of its own (:class:`FleetListing`),
no pass waits for it, and the collection runs in the first pass after it ended, as Karpenter's garbage
collection controllers run beside its provisioner
(``[core]:pkg/controllers/nodeclaim/garbagecollection/controller.go``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodesmith.core.ports import CloudProvider, Instance

__all__ = ["FleetListing"]

LOG = logging.getLogger(__name__)


class FleetListing:
    """One fleet listing at a time, begun by a pass and taken by the first pass that finds it ended.

    A listing that began before the pass taking it is as safe to collect against as the pass's own: an instance of
    a settled NodeClaim it does not show (launched since) is described by id before anything is deleted, and an
    instance it shows is an orphan only when no NodeClaim the pass read claims it and EC2, asked again by id, says
    it still runs (:func:`~nodesmith.services.provisioning.lifecycle.collect_garbage`). The listing is tied to the
    cloud provider it was begun with; a pass with another provider (its ports replaced) begins a new one.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cloud: CloudProvider | None = None
        self._future: Future[list[Instance]] | None = None

    def begin(self, cloud: CloudProvider) -> None:
        """Begin listing ``cloud``'s fleet in a thread of its own, unless a listing for it is under way or has
        ended and not been taken yet."""
        with self._lock:
            if self._future is not None and self._cloud is cloud:
                return
            future: Future[list[Instance]] = Future()
            self._cloud, self._future = cloud, future
        future.set_running_or_notify_cancel()

        def run() -> None:
            try:
                future.set_result(list(cloud.list_instances()))
            except BaseException as exc:  # the taking pass raises it
                future.set_exception(exc)

        threading.Thread(target=run, name="fleet-listing", daemon=True).start()

    def take(self, cloud: CloudProvider) -> list[Instance] | None:
        """The instances of the listing begun for ``cloud`` once it has ended, else None (under way, or none
        begun). A listing taken is forgotten, so the next collection due begins another. Raises what the listing
        raised (``cloud.list_instances()``'s errors)."""
        with self._lock:
            future = self._future
            if future is None or self._cloud is not cloud or not future.done():
                return None
            self._cloud = self._future = None
        return future.result()
