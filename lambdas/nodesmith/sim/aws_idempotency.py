"""CreateFleet's ``ClientToken`` as EC2 honours it, for the embedded AWS: moto ignores the token.

EC2 makes a request with a client token idempotent ("Ensuring idempotency in Amazon EC2 API requests", EC2 API
reference): a repeat of a successful CreateFleet with the same token answers the first call's fleet and
instances and launches nothing more. Nodesmith relies on it: a NodeClaim whose launch went through but whose
status write failed is launched again in a later pass with the same token, and must not get a second instance.
:func:`honour_client_tokens` patches moto's CreateFleet handler in this process (once) to remember each
successful answer by (backend, token) and return it for a repeat.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["honour_client_tokens"]

_PATCHED: list[bool] = []


def honour_client_tokens() -> None:
    """Make moto's CreateFleet idempotent by ``ClientToken`` (see the module docstring); idempotent itself."""
    if _PATCHED:
        return
    from moto.ec2.responses.fleets import Fleets

    from nodesmith.sim.aws_capacity_reservations import serve_capacity_reservations

    serve_capacity_reservations()  # inside the token check: a repeat answers the first launch, not a new check

    create = Fleets.create_fleet
    lock = threading.Lock()
    answers: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

    def create_fleet(self: Any) -> Any:
        token = self._get_param("ClientToken")
        if not token:
            return create(self)
        with lock:  # one answer per token, even for two calls at once
            seen = answers.setdefault(self.ec2_backend, {})
            if token not in seen:
                seen[token] = create(self)
            return seen[token]

    Fleets.create_fleet = create_fleet  # type: ignore[method-assign]
    _PATCHED.append(True)
