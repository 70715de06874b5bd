"""Exactly-once drains: Powertools idempotency on the DynamoDB state table.

:class:`IdempotentRunner` is the ``once(key, work)`` callable that
:func:`nodesmith.services.interrupt_batch.handle_batch` runs every drain through. It wraps
Powertools' ``idempotent_function`` with a ``DynamoDBPersistenceLayer`` on the state table
(composite key: ``pk = idempotency#<function name>``, ``sk = <function>#<md5 of the key>``; TTL on
the table's ``expires_at``), so:

* the first call with a key saves an INPROGRESS record, runs ``work`` and stores its JSON result;
* a later call with the same key returns the stored result without running ``work`` (a duplicate
  delivery, or a redelivery after the record was acknowledged);
* a call while another invocation holds an INPROGRESS record raises
  :class:`~nodesmith.core.errors.InProgressElsewhereError`;
* if ``work`` raises, the record is deleted, so the SQS redelivery runs it again; if the function
  is killed (timeout, crash), the INPROGRESS record expires with the invocation's remaining time
  (the Lambda context is registered per invocation with :meth:`IdempotentRunner.bind`), which is
  always before SQS redelivers (visibility timeout = 6 x function timeout), so the redelivery
  resumes the drain.

Nothing here touches AWS or imports boto3 until the first call (cold start; no import-time I/O).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from nodesmith.core.errors import InProgressElsewhereError

if TYPE_CHECKING:
    from collections.abc import Callable

    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["IDEMPOTENCY_TTL_SECONDS", "IdempotentRunner"]

IDEMPOTENCY_TTL_SECONDS = 3600
"""How long a completed drain's record answers duplicates (seconds). The interruption queue keeps a
message 300 s, so any duplicate or redelivery arrives well within this."""


def _call(*, task: dict[str, Any], work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The function Powertools makes idempotent: ``task`` is hashed into the key, ``work`` runs."""
    return work()


class IdempotentRunner:
    """``runner(key, work)``: run ``work`` at most once per ``key`` across invocations (see the module docstring).

    ``table_name`` is the state table; ``client`` an optional boto3 DynamoDB client (tests);
    ``expires_after_seconds`` how long results answer duplicates. Thread-safe: the drains of one
    batch call it from a pool.
    """

    def __init__(
        self, *, table_name: str, client: Any | None = None, expires_after_seconds: int = IDEMPOTENCY_TTL_SECONDS
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._expires = expires_after_seconds
        self._lock = threading.Lock()
        self._config: Any = None
        self._run: Callable[..., dict[str, Any]] | None = None
        self._context: LambdaContext | None = None

    def _build(self) -> Callable[..., dict[str, Any]]:
        with self._lock:
            if self._run is None:
                from aws_lambda_powertools.utilities.idempotency import (
                    DynamoDBPersistenceLayer,
                    IdempotencyConfig,
                    idempotent_function,
                )

                if self._client is None:
                    from nodesmith.adapters.aws import clients

                    self._client = clients.client("dynamodb")
                layer = DynamoDBPersistenceLayer(
                    table_name=self.table_name,
                    key_attr="pk",
                    sort_key_attr="sk",
                    expiry_attr="expires_at",
                    boto3_client=self._client,
                )
                self._config = IdempotencyConfig(
                    event_key_jmespath="key", raise_on_no_idempotency_key=True, expires_after_seconds=self._expires
                )
                if self._context is not None:
                    self._config.register_lambda_context(self._context)
                self._run = idempotent_function(
                    _call, data_keyword_argument="task", persistence_store=layer, config=self._config
                )
            return self._run

    def bind(self, lambda_context: LambdaContext | None) -> None:
        """Use this invocation's context: an INPROGRESS record then expires when the invocation would."""
        self._context = lambda_context
        if self._config is not None and lambda_context is not None:
            self._config.register_lambda_context(lambda_context)

    def __call__(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``work`` once for ``key`` and return its JSON result (or the stored one).

        Raises :class:`~nodesmith.core.errors.InProgressElsewhereError` while another invocation
        runs the same key; whatever ``work`` raises; Powertools' persistence errors when DynamoDB fails.
        """
        from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

        run = self._run or self._build()
        try:
            result = run(task={"key": key}, work=work)
        except IdempotencyAlreadyInProgressError as exc:
            raise InProgressElsewhereError(str(exc), key=key) from None
        return dict(result or {})
