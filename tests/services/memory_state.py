"""An in-memory :class:`nodesmith.core.ports.StateStore` for tests: same semantics as the DynamoDB one.

Leases follow the conditional write ``attribute_not_exists OR expires_at < now OR holder = me``;
expired entries are never returned. A lock makes it safe for the thread pools of the services.
Load it by path (``load_module`` in the tests): the test folders are not packages.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from nodesmith.core.ports import LeaseInfo, OfferingMark


@dataclass
class MemoryStateStore:
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (holder, expires_at)
    acquired: dict[str, float] = field(default_factory=dict)  # name -> when its holder last acquired it
    offerings: dict[tuple[str, str, str], OfferingMark] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def acquire_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        with self._lock:
            current = self.leases.get(name)
            if current is not None and current[1] >= now and current[0] != holder:
                return False
            self.leases[name] = (holder, math.ceil(now + ttl_seconds))
            self.acquired[name] = now
            return True

    def renew_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        with self._lock:
            current = self.leases.get(name)
            if current is None or current[0] != holder:
                return False
            self.leases[name] = (holder, math.ceil(now + ttl_seconds))
            return True

    def release_lease(self, *, name: str, holder: str) -> bool:
        with self._lock:
            current = self.leases.get(name)
            if current is None or current[0] != holder:
                return False
            del self.leases[name]
            return True

    def lease_holder(self, *, name: str, now: float) -> str | None:
        current = self.leases.get(name)
        return current[0] if current is not None and current[1] >= now else None

    def lease_info(self, *, name: str, now: float) -> LeaseInfo | None:
        current = self.leases.get(name)
        if current is None or current[1] < now:
            return None
        return LeaseInfo(holder=current[0], acquired_at=self.acquired.get(name, 0.0), expires_at=current[1])

    def mark_unavailable(
        self, *, instance_type: str, zone: str, capacity_type: str, expires_at: float, reason: str = ""
    ) -> None:
        with self._lock:
            self.writes.append(f"offering#{instance_type}#{zone}#{capacity_type}")
            self.offerings[(instance_type, zone, capacity_type)] = OfferingMark(
                instance_type=instance_type,
                zone=zone,
                capacity_type=capacity_type,
                expires_at=math.ceil(expires_at),
                reason=reason,
            )

    def list_unavailable(self, *, now: float) -> list[OfferingMark]:
        return [m for m in self.offerings.values() if m.expires_at > now]
