"""Notes a conversion leaves for the user, and the error it raises when it cannot convert.

A :class:`Note` says what happened to one field of one input object:

* ``changed``: carried over, but the meaning moved or shifted (``ttlSecondsAfterEmpty: 30`` ->
  ``consolidationPolicy: WhenEmpty`` + ``consolidateAfter: 30s``), or a value was written to keep
  the old behaviour where Karpenter v1's default differs;
* ``dropped``: not carried over (no v1 equivalent, or not recognised);
* ``action``: converted, but the user should check or do something (pin an AMI version, put the
  kubelet block on an EC2NodeClass that is not in the input, ...).

Rendered one per line, e.g.
``legacy.yaml#1 Provisioner/default: not carried over: spec.provider.launchTemplate: <why>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from nodesmith.core.errors import NodesmithError

__all__ = ["NOTE_LABELS", "ConversionError", "Note", "NoteKind", "NoteSink"]

NoteKind = Literal["changed", "dropped", "action"]

NOTE_LABELS: Final[dict[str, str]] = {
    "changed": "changed",
    "dropped": "not carried over",
    "action": "action needed",
}
"""How each note kind is labelled when rendered."""


@dataclass(frozen=True, slots=True)
class Note:
    """One remark about one field of one input object.

    ``obj`` is ``Kind/name`` of the *input* object (``Provisioner/default``); ``path`` the input
    field path (``spec.ttlSecondsAfterEmpty``; empty for the whole object); ``source`` where the
    object was read (``file.yaml#2``; empty when unknown).
    """

    kind: NoteKind
    obj: str
    path: str
    message: str
    source: str = ""

    @property
    def label(self) -> str:
        """``changed``, ``not carried over`` or ``action needed``."""
        return NOTE_LABELS[self.kind]

    def render(self) -> str:
        """One line: ``[source ]obj: label: [path: ]message``."""
        where = f"{self.source} " if self.source else ""
        at = f"{self.path}: " if self.path else ""
        return f"{where}{self.obj}: {self.label}: {at}{self.message}"


class ConversionError(NodesmithError):
    """An input cannot be converted, or its conversion would not be a valid v1 object.

    The message names the source (``file#doc``), the object, the field path and the reason.
    """

    def __init__(self, message: str, *, source: str = "", obj: str = "", path: str = "") -> None:
        parts = [p for p in (source, obj) if p]
        prefix = " ".join(parts)
        at = f"{path}: " if path else ""
        super().__init__(f"{prefix}: {at}{message}" if prefix else f"{at}{message}")
        self.source = source
        self.obj = obj
        self.path = path
        self.reason = message


class NoteSink:
    """Collects notes (and raises errors) for one input object."""

    def __init__(self, *, obj: str, source: str, notes: list[Note]) -> None:
        self.obj = obj
        self.source = source
        self._notes = notes

    def changed(self, path: str, message: str) -> None:
        """Record a carried-over field whose meaning moved or shifted."""
        self._notes.append(Note("changed", self.obj, path, message, self.source))

    def dropped(self, path: str, message: str) -> None:
        """Record a field that is not carried over."""
        self._notes.append(Note("dropped", self.obj, path, message, self.source))

    def action(self, path: str, message: str) -> None:
        """Record something the user should check or do."""
        self._notes.append(Note("action", self.obj, path, message, self.source))

    def error(self, path: str, message: str) -> ConversionError:
        """A :class:`ConversionError` for this object (to ``raise``)."""
        return ConversionError(message, source=self.source, obj=self.obj, path=path)
