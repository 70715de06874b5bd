"""``nodesmith convert``: Karpenter v1alpha5/v1beta1 manifests -> v1 manifests, with notes.

Reads every ``-f`` file (a directory means its ``*.yaml``/``*.yml`` files, sorted), converts them
together with :func:`nodesmith.core.convert.convert_documents` (so a Provisioner's kubelet settings
can land on the AWSNodeTemplate of another file), and writes:

* stdout: the converted documents as one multi-document YAML stream (``---`` before each), in
  input order; nothing else. With ``--output-dir DIR`` the documents go instead to
  ``DIR/<input file name>``, one file per input file, and stdout stays empty.
* stderr: one line per note (``<file>#<doc> <Kind>/<name>: changed|not carried over|action needed:
  <input field path>: <what and why>``), then a one-line summary.

Multi-line strings (``userData``) are written as YAML literal blocks.

Exit codes: 0 converted (notes or not); 2 bad input: a file that cannot be read or parsed, a
document that cannot be converted, or a result that would not validate against the v1 models
(``error: <file>#<doc> <Kind>/<name>: <field>: <reason>`` on stderr, nothing on stdout).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from nodesmith.cli.exits import EXIT_BAD_INPUT, EXIT_OK, BadInput, report
from nodesmith.core.convert import ConversionError, InputDocument, OutputDocument, convert_documents

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

    from nodesmith.core.convert import ConvertResult

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "dump_documents", "read_documents", "run_convert"]


class _Dumper(yaml.SafeDumper):
    """Safe YAML with literal blocks for multi-line strings and no anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # indent list items under their key, as kubectl does


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def run_convert(*, files: list[Path], output_dir: Path | None, default_instance_profile: str | None = None) -> int:
    """Convert ``files`` and write the result (see the module doc). Returns the exit code.

    ``default_instance_profile`` fills ``instanceProfile`` of v1alpha1 AWSNodeTemplates that relied
    on Karpenter v0.31's global ``aws.defaultInstanceProfile`` setting.
    """
    try:
        paths = _expand(files)
        inputs = read_documents(paths)
        result = convert_documents(inputs, default_instance_profile=default_instance_profile)
        targets = _targets(paths, output_dir) if output_dir is not None else None
    except BadInput as exc:
        return report(exc)
    except ConversionError as exc:
        return report(BadInput(str(exc)))
    for note in result.notes:
        print(note.render(), file=sys.stderr)
    if targets is None:
        dump_documents((d.body for d in result.documents), sys.stdout)
    else:
        _write_files(result.documents, targets)
    print(_summary(result, inputs), file=sys.stderr)
    return EXIT_OK


def read_documents(paths: Sequence[Path]) -> list[InputDocument]:
    """Every non-empty YAML document of ``paths``, with its file and 1-based document number.

    Raises ``BadInput`` for an unreadable file, invalid YAML or a document that is not an object.
    """
    inputs: list[InputDocument] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from exc
        number = 0
        loader = yaml.safe_load_all(text)
        while True:
            number += 1
            try:
                doc = next(loader)
            except StopIteration:
                break
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise BadInput(f"{path}#{number}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise BadInput(f"{path}#{number}: expected an object with apiVersion and kind")
            inputs.append(InputDocument(body=doc, source=str(path), document=number))
    return inputs


def dump_documents(documents: Iterable[dict[str, Any]], stream: TextIO) -> None:
    """Write ``documents`` as a multi-document YAML stream, ``---`` before each, keys in order."""
    yaml.dump_all(
        documents,
        stream,
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
    )


def _expand(files: Sequence[Path]) -> list[Path]:
    paths: list[Path] = []
    for path in files:
        if path.is_dir():
            paths.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()))
        elif not path.exists():
            raise BadInput(f"{path}: no such file")
        else:
            paths.append(path)
    if not paths:
        raise BadInput("no manifest files given")
    return paths


def _targets(paths: Sequence[Path], output_dir: Path) -> dict[str, Path]:
    """Output file per input file (same name under ``output_dir``); refuses clashes and overwriting inputs."""
    if output_dir.exists() and not output_dir.is_dir():
        raise BadInput(f"{output_dir}: not a directory")
    targets: dict[str, Path] = {}
    inputs = {p.resolve() for p in paths}
    seen: dict[Path, Path] = {}
    for path in paths:
        target = output_dir / path.name
        if target.resolve() in inputs:
            raise BadInput(f"{target}: would overwrite an input file; choose another --output-dir")
        if target in seen and seen[target] != path:
            raise BadInput(f"{seen[target]} and {path} would both be written to {target}")
        seen[target] = path
        targets[str(path)] = target
    return targets


def _write_files(documents: Sequence[OutputDocument], targets: dict[str, Path]) -> None:
    by_target: dict[Path, list[dict[str, Any]]] = {t: [] for t in targets.values()}
    for doc in documents:
        by_target[targets[doc.source]].append(doc.body)
    next(iter(by_target)).parent.mkdir(parents=True, exist_ok=True)
    for target, bodies in by_target.items():
        with target.open("w", encoding="utf-8") as stream:
            dump_documents(bodies, stream)
        print(f"wrote {target} ({len(bodies)} document{'s' if len(bodies) != 1 else ''})", file=sys.stderr)


def _summary(result: ConvertResult, inputs: Sequence[InputDocument]) -> str:
    kinds = Counter(str(d.body.get("kind")) for d in result.documents)
    karpenter = [
        f"{n} {k}{'es' if k.endswith('s') and n != 1 else 's' if n != 1 else ''}"
        for k in ("NodePool", "EC2NodeClass")
        if (n := kinds.pop(k, 0))
    ]
    others = sum(kinds.values())
    labels = Counter(n.label for n in result.notes)
    notes = ", ".join(f"{labels[k]} {k}" for k in ("changed", "not carried over", "action needed") if labels[k])
    parts = [*karpenter, f"{others} other object{'s' if others != 1 else ''}"]
    return (
        f"converted {len(inputs)} input document{'s' if len(inputs) != 1 else ''} into "
        f"{', '.join(parts)}; notes: {notes or 'none'}"
    )
