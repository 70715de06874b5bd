"""Convert Karpenter v1alpha5/v1beta1 manifests to v1, noting every semantic change and every field
that could not be carried over. Pure: documents in (already parsed), documents and notes out.

Inputs, by ``apiVersion`` / ``kind``:

* ``karpenter.sh/v1alpha5`` ``Provisioner`` -> ``karpenter.sh/v1`` ``NodePool`` (and, for an inline
  ``spec.provider``, an ``EC2NodeClass`` named after it), see :mod:`.nodepool`;
* ``karpenter.k8s.aws/v1alpha1`` ``AWSNodeTemplate`` -> ``karpenter.k8s.aws/v1`` ``EC2NodeClass``,
  see :mod:`.nodeclass`;
* ``karpenter.sh/v1beta1`` ``NodePool`` / ``karpenter.k8s.aws/v1beta1`` ``EC2NodeClass`` -> v1;
* v1 ``NodePool`` / ``EC2NodeClass``: kept as given (they still take part in kubelet placement);
* ``Machine`` / v1beta1 ``NodeClaim``: dropped with a note (Karpenter creates them);
* anything else (Pods, Deployments, Nodes, ...): kept, with ``karpenter.sh/do-not-evict`` /
  ``do-not-consolidate`` renamed to ``karpenter.sh/do-not-disrupt`` and ``karpenter.sh/provisioner-name``
  renamed to ``karpenter.sh/nodepool`` in pod node selectors/affinity, see :mod:`.annotations`;
* ``List`` documents are unpacked.

Kubelet blocks move from NodePools to their EC2NodeClass (:mod:`.kubelet`). Every NodePool and
EC2NodeClass produced is validated with the v1 models (:class:`~nodesmith.core.api.NodePool`,
:class:`~nodesmith.core.api.EC2NodeClass`) before it is returned.

Errors: :class:`ConversionError` (a :class:`~nodesmith.core.errors.NodesmithError`) naming the
source, object, field path and reason, for input that cannot be converted or output that would
not validate.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from nodesmith.core.api.common import format_loc
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.convert.annotations import clean_metadata, rewrite_object
from nodesmith.core.convert.fields import Fields
from nodesmith.core.convert.kubelet import ClassSlot, PoolSlot, place_kubelets
from nodesmith.core.convert.nodeclass import convert_legacy_template, convert_v1beta1_nodeclass
from nodesmith.core.convert.nodepool import convert_provisioner, convert_v1beta1_nodepool
from nodesmith.core.convert.notes import ConversionError, Note, NoteKind, NoteSink

__all__ = [
    "ConversionError",
    "ConvertResult",
    "InputDocument",
    "Note",
    "NoteKind",
    "OutputDocument",
    "convert",
    "convert_documents",
]

_RUNTIME_KINDS: Final = {"Machine", "NodeClaim", "MachineDisruptionGate"}
_KARPENTER_GROUPS: Final = ("karpenter.sh/", "karpenter.k8s.aws/")


@dataclass(frozen=True, slots=True)
class InputDocument:
    """A parsed manifest document and where it came from (``source`` file, 1-based ``document``)."""

    body: Mapping[str, Any]
    source: str = ""
    document: int = 0

    @property
    def where(self) -> str:
        """``file#n`` (or ``#n``, or empty)."""
        if not self.document:
            return self.source
        return f"{self.source}#{self.document}"


@dataclass(frozen=True, slots=True)
class OutputDocument:
    """A converted (or passed-through) document and the input document it came from."""

    body: dict[str, Any]
    source: str = ""
    document: int = 0


@dataclass(slots=True)
class ConvertResult:
    """Documents in input order (a generated EC2NodeClass right before its NodePool, per-pool class
    copies right after their class) and the notes, in the order they were made."""

    documents: list[OutputDocument] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def convert(documents: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[Note]]:
    """Convert parsed manifests (see the module doc); returns (v1 documents, notes).

    Raises :class:`ConversionError`.
    """
    result = convert_documents([InputDocument(body=d, document=i + 1) for i, d in enumerate(documents)])
    return [d.body for d in result.documents], result.notes


def convert_documents(inputs: Sequence[InputDocument], *, default_instance_profile: str | None = None) -> ConvertResult:
    """Convert parsed manifests with their sources (see the module doc).

    ``default_instance_profile`` is used for v1alpha1 templates that relied on Karpenter's global
    ``aws.defaultInstanceProfile`` setting. Raises :class:`ConversionError`.
    """
    return _Conversion(default_instance_profile).run(inputs)


@dataclass(slots=True)
class _Slot:
    """One input document's outputs, filled in after kubelet placement."""

    origin: InputDocument
    pool: PoolSlot | None = None
    klass: ClassSlot | None = None
    generated: ClassSlot | None = None
    other: dict[str, Any] | None = None


class _Conversion:
    def __init__(self, default_instance_profile: str | None) -> None:
        self.default_instance_profile = default_instance_profile
        self.notes: list[Note] = []
        self.slots: list[_Slot] = []
        self.pools: dict[str, _Slot] = {}
        self.classes: dict[str, ClassSlot] = {}

    def run(self, inputs: Sequence[InputDocument]) -> ConvertResult:
        providers: list[tuple[_Slot, Fields]] = []
        origins = _unpack(inputs)
        for origin in origins:
            slot, provider = self._add(origin)
            if slot is not None:
                self.slots.append(slot)
            if slot is not None and provider is not None:
                providers.append((slot, provider))
        for slot, provider in providers:
            self._generate_class(slot, provider)
        pools = [s.pool for s in self.slots if s.pool is not None]
        place_kubelets(pools, self.classes, set(self.classes))
        documents = self._emit()
        order: dict[str, int] = {}
        for origin in origins:
            order.setdefault(origin.where, len(order))
        self.notes.sort(key=lambda note: order.get(note.source, len(order)))  # stable: per object, in order made
        return ConvertResult(documents=documents, notes=self.notes)

    def _sink(self, origin: InputDocument, kind: str, name: str) -> NoteSink:
        return NoteSink(obj=f"{kind}/{name}" if name else kind, source=origin.where, notes=self.notes)

    def _add(self, origin: InputDocument) -> tuple[_Slot | None, Fields | None]:
        """Convert one document into a slot (None when dropped), plus a Provisioner's inline provider."""
        body = origin.body
        api_version, kind = body.get("apiVersion"), body.get("kind")
        meta = body.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        notes = self._sink(origin, str(kind or "document"), name if isinstance(name, str) else "")
        if not isinstance(api_version, str) or not api_version:
            raise notes.error("apiVersion", "is required")
        if not isinstance(kind, str) or not kind:
            raise notes.error("kind", "is required")
        slot = _Slot(origin=origin)
        if not api_version.startswith(_KARPENTER_GROUPS):
            slot.other = rewrite_object(body, notes)
            return slot, None
        if kind in _RUNTIME_KINDS:
            notes.dropped("", "created and owned by Karpenter, not written by users; Karpenter v1 makes NodeClaims")
            return None, None
        provider = self._add_karpenter(slot, api_version, kind, notes)
        return slot, provider

    def _add_karpenter(self, slot: _Slot, api_version: str, kind: str, notes: NoteSink) -> Fields | None:
        body = slot.origin.body
        doc = Fields(body, "", notes)
        provider: Fields | None = None
        if (api_version, kind) == ("karpenter.sh/v1alpha5", "Provisioner"):
            slot.pool, provider = convert_provisioner(doc)
        elif (api_version, kind) == ("karpenter.sh/v1beta1", "NodePool"):
            slot.pool = convert_v1beta1_nodepool(doc)
        elif (api_version, kind) == ("karpenter.sh/v1", "NodePool"):
            slot.pool = self._v1_pool(body, notes)
        elif (api_version, kind) == ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"):
            spec = convert_legacy_template(
                doc.take_fields("spec"), default_instance_profile=self.default_instance_profile
            )
            self._register_class(slot, notes, doc, spec)
        elif (api_version, kind) == ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"):
            self._register_class(slot, notes, doc, convert_v1beta1_nodeclass(doc.take_fields("spec")))
        elif (api_version, kind) == ("karpenter.k8s.aws/v1", "EC2NodeClass"):
            _validate(EC2NodeClass, dict(body), notes)
            self._register_class(slot, notes, None, copy.deepcopy(dict(body)))
        else:
            raise notes.error("", f"unsupported Karpenter object {api_version} {kind}")
        if slot.pool is not None:
            self._register_pool(slot, notes)
        return provider

    def _register_pool(self, slot: _Slot, notes: NoteSink) -> None:
        assert slot.pool is not None
        if slot.pool.name in self.pools:
            raise notes.error("metadata.name", "another Provisioner/NodePool in the input has this name")
        self.pools[slot.pool.name] = slot

    def _register_class(self, slot: _Slot, notes: NoteSink, doc: Fields | None, out: dict[str, Any]) -> None:
        if doc is not None:
            doc.ignore("apiVersion", "kind", "status")
            metadata = clean_metadata(doc.take("metadata"), notes)
            doc.report_unused()
            out = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": metadata, "spec": out}
        name = out["metadata"]["name"]
        if name in self.classes:
            raise notes.error("metadata.name", "another AWSNodeTemplate/EC2NodeClass in the input has this name")
        slot.klass = ClassSlot(name=name, body=out, notes=notes)
        self.classes[name] = slot.klass

    def _v1_pool(self, body: Mapping[str, Any], notes: NoteSink) -> PoolSlot:
        out = copy.deepcopy(dict(body))
        model = _validate(NodePool, out, notes)
        ref = model.spec.template.spec.node_class_ref
        is_ec2 = (ref.group, ref.kind) == ("karpenter.k8s.aws", "EC2NodeClass")
        return PoolSlot(
            name=model.name,
            body=out,
            class_name=ref.name if is_ec2 else None,
            kubelet=None,
            kubelet_path="",
            notes=notes,
        )

    def _generate_class(self, slot: _Slot, provider: Fields) -> None:
        assert slot.pool is not None
        pool = slot.pool
        name = pool.name
        taken = set(self.classes)
        if name in taken:
            base, n = f"{name}-provider", 2
            name = base
            while name in taken:
                name, n = f"{base}-{n}", n + 1
            pool.body["spec"]["template"]["spec"]["nodeClassRef"]["name"] = name
            pool.class_name = name
        spec = convert_legacy_template(provider, default_instance_profile=self.default_instance_profile)
        body = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}
        pool.notes.changed(provider.path, f"inline provider became EC2NodeClass {name}, referenced by nodeClassRef")
        slot.generated = ClassSlot(name=name, body=body, notes=pool.notes)
        self.classes[name] = slot.generated

    def _emit(self) -> list[OutputDocument]:
        out: list[OutputDocument] = []

        def emit(body: dict[str, Any], origin: InputDocument) -> None:
            out.append(OutputDocument(body=body, source=origin.source, document=origin.document))

        for slot in self.slots:
            if slot.other is not None:
                emit(slot.other, slot.origin)
            for klass in (slot.generated, slot.klass):
                if klass is not None:
                    for body in (klass.body, *klass.copies):
                        _validate(EC2NodeClass, body, klass.notes)
                        emit(body, slot.origin)
            if slot.pool is not None:
                _validate(NodePool, slot.pool.body, slot.pool.notes)
                emit(slot.pool.body, slot.origin)
        return out


def _unpack(inputs: Sequence[InputDocument]) -> list[InputDocument]:
    out: list[InputDocument] = []
    for origin in inputs:
        body = origin.body
        kind = body.get("kind")
        items = body.get("items")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            for i, item in enumerate(items):
                if not isinstance(item, Mapping):
                    raise ConversionError("expected an object", source=origin.where, obj=kind, path=f"items[{i}]")
                out.append(InputDocument(body=item, source=origin.source, document=origin.document))
        else:
            out.append(origin)
    return out


def _validate(model: type[BaseModel], body: dict[str, Any], notes: NoteSink) -> Any:
    """``model.model_validate(body)``, turning a ValidationError into a ConversionError naming the output."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        reason = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            reason = "unknown field"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        name = body.get("metadata", {}).get("name", "")
        raise ConversionError(
            f"the converted {body.get('kind')} {name} is not valid v1: {reason}{more}",
            source=notes.source,
            obj=notes.obj,
            path=format_loc(tuple(first.get("loc", ()))),
        ) from exc
