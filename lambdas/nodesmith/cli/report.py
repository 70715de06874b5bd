"""``nodesmith demo --report PATH.html``: one self-contained HTML page that shows what the demo did.

The page needs nothing at view time: no network, no CDN, no external file. It holds:

* a summary (the demo's JSON summary, and the error when a step failed);
* a timeline chart of pending and running pods, nodes and cluster cost (USD/hour), with the spot
  interruption and its drain, and the disruption steps, marked on it. The chart is inline SVG drawn
  by a small inline script from the samples embedded as JSON; once drawn, the ``<svg>`` carries
  ``data-series-drawn`` (lines with at least two points) and ``data-markers-drawn`` so a headless
  browser can check that it rendered;
* a table of the NodeClaims (created, launched with instance / type / zone / capacity type /
  price, registered on which node, initialized, how it ended: a static NodePool's scale-down says so), rebuilt
  from the Kubernetes Events
  the Lambdas posted, as ``kubectl get events`` would show them;
* the full timeline of decisions and events.

Inputs are what :mod:`nodesmith.cli.demo` records: ``timeline`` as ``(seconds, kind, text)``,
``samples`` as ``{"t", "pending", "running", "nodes"}`` plus optional ``"cost"`` (USD/hour).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

__all__ = ["MARKER_KINDS", "NodeClaimRow", "nodeclaim_rows", "render_report", "write_report"]

MARKER_KINDS: Mapping[str, tuple[str, str]] = {
    "EventBridge": ("interruption", "spot interruption warning"),
    "SQS -> Lambda": ("drain", "cordoned, drained, replaced"),
    "Emptiness": ("disruption", "empty node removed"),
    "Drift": ("disruption", "drifted node replaced"),
    "FAILED": ("error", "step failed"),
}
"""Timeline kinds drawn on the chart: kind -> (marker class, label)."""

_DECISION_KINDS = frozenset(
    {
        "SpotInterrupted",
        "TerminatingOnInterruption",
        "Disrupted",
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionTerminating",
        "DisruptionBlocked",
        "Unconsolidatable",
        "FailedScheduling",
        "InsufficientCapacityError",
        "FailedDraining",
        "EventBridge",
        "SQS -> Lambda",
        "Emptiness",
        "Drift",
        "FAILED",
    }
)
_OBJECT = re.compile(r"^(?P<kind>NodeClaim|Node|Pod)/(?P<name>[^:]+): (?P<message>.*)$")
_LAUNCH = re.compile(r"instance (?P<id>\S+) \((?P<type>[^,]+), (?P<zone>[^,]+), (?P<ct>[^,]+), \$(?P<price>[\d.]+)/h\)")
_REGISTERED_NODE = re.compile(r"node (?P<node>\S+)$")
_INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")
_NODE_ENDINGS = {
    "SpotInterrupted": "spot interrupted",
    "InstanceTerminating": "instance terminating",
    "InstanceStopping": "instance stopping",
    "InstanceUnhealthy": "scheduled change",
    "DisruptionTerminating": "disrupted",
}


@dataclass
class NodeClaimRow:
    """One NodeClaim as the Events tell it. Times are demo seconds; ``ended`` says how it went away."""

    name: str
    created: float | None = None
    launched: float | None = None
    instance: str = ""
    instance_type: str = ""
    zone: str = ""
    capacity_type: str = ""
    price: float | None = None
    registered: float | None = None
    node: str = ""
    initialized: float | None = None
    ended: str = ""
    notes: list[str] = field(default_factory=list)


def nodeclaim_rows(timeline: Sequence[tuple[float, str, str]]) -> list[NodeClaimRow]:
    """Rebuild the NodeClaims' lifecycles from the timeline's Event lines (first seen wins).

    Node Events are matched to their NodeClaim by the node name of its ``Registered`` Event, or by
    the instance id in their message (a node interrupted before Nodesmith saw it register). The
    demo prints identical Event messages once, so for a command that removed several empty nodes
    only one carries the Event; its ``Emptiness`` line names them all.
    """
    rows: dict[str, NodeClaimRow] = {}
    by_node: dict[str, NodeClaimRow] = {}

    def row(name: str) -> NodeClaimRow:
        return rows.setdefault(name, NodeClaimRow(name=name))

    for at, kind, text in timeline:
        if kind == "NodeClaim" and text.endswith("created by the reconcile Lambda"):
            created = row(text.split()[0])
            created.created = at if created.created is None else created.created
            continue
        if kind == "Emptiness":
            for name in re.findall(r"[\w.-]+", text.partition(":")[2]):
                empty = by_node.get(name)
                if empty is not None and not empty.ended:
                    empty.ended = f"removed as empty at {at:.1f}s"
            continue
        match = _OBJECT.match(text)
        if match is None:
            continue
        obj, name, message = match.group("kind"), match.group("name"), match.group("message")
        if obj == "NodeClaim":
            _claim_event(row(name), kind, at, message, by_node)
        elif obj == "Node":
            claim: NodeClaimRow | None = by_node.get(name) or _by_instance(rows.values(), message)
            ending = _NODE_ENDINGS.get(kind)
            if claim is not None and ending and not claim.ended:
                reason = message.split(":", 1)[1].strip() if kind == "DisruptionTerminating" else ""
                if "static NodePool" in reason:
                    ending = "static NodePool scale-down"
                claim.ended = f"{ending} at {at:.1f}s" + (f" ({reason})" if reason else "")
    return sorted(rows.values(), key=lambda r: (r.created if r.created is not None else float("inf"), r.name))


def _by_instance(rows: Iterable[NodeClaimRow], message: str) -> NodeClaimRow | None:
    ids = set(_INSTANCE_ID.findall(message))
    return next((r for r in rows if r.instance and r.instance in ids), None)


def _claim_event(claim: NodeClaimRow, kind: str, at: float, message: str, by_node: dict[str, NodeClaimRow]) -> None:
    if kind == "Launched" and claim.launched is None:
        claim.launched = at
        launch = _LAUNCH.search(message)
        if launch:
            claim.instance, claim.instance_type = launch.group("id"), launch.group("type")
            claim.zone, claim.capacity_type = launch.group("zone"), launch.group("ct")
            claim.price = float(launch.group("price"))
    elif kind == "Registered" and claim.registered is None:
        claim.registered = at
        node = _REGISTERED_NODE.search(message)
        if node:
            claim.node = node.group("node")
            by_node[claim.node] = claim
    elif kind == "Initialized" and claim.initialized is None:
        claim.initialized = at
    elif kind in {"InsufficientCapacityError", "FailedLaunch", "LivenessExpired", "InstanceTerminated"}:
        claim.notes.append(f"{kind} at {at:.1f}s")
        if kind != "InsufficientCapacityError" and not claim.ended:
            claim.ended = f"{kind} at {at:.1f}s"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}s"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _nodeclaim_table(rows: Sequence[NodeClaimRow]) -> str:
    head = (
        "<tr><th>NodeClaim</th><th>created</th><th>launched</th><th>instance</th><th>type</th><th>zone</th>"
        "<th>capacity</th><th>USD/hour</th><th>registered</th><th>node</th><th>initialized</th><th>ended</th></tr>"
    )
    body = []
    for r in rows:
        price = "" if r.price is None else f"{r.price:.4f}"
        ended = "; ".join([r.ended, *r.notes]) if r.ended or r.notes else "running at the end"
        cells = [r.name, _seconds(r.created), _seconds(r.launched), r.instance, r.instance_type, r.zone]
        cells += [r.capacity_type, price, _seconds(r.registered), r.node, _seconds(r.initialized), ended]
        body.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    if not body:
        body.append('<tr><td colspan="12">no NodeClaim was created</td></tr>')
    return f'<table id="nodeclaims"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _timeline_table(timeline: Sequence[tuple[float, str, str]]) -> str:
    body = []
    for at, kind, text in timeline:
        css = ' class="decision"' if kind in _DECISION_KINDS else ""
        body.append(f"<tr{css}><td>{at:.2f}s</td><td>{_esc(kind)}</td><td>{_esc(text)}</td></tr>")
    return (
        '<table id="timeline"><thead><tr><th>at</th><th>what</th><th>detail</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _summary_table(summary: Mapping[str, Any]) -> str:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    cells = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(text(v))}</td></tr>" for k, v in summary.items())
    return f'<table id="summary">{cells}</table>'


def _markers(timeline: Sequence[tuple[float, str, str]]) -> list[dict[str, Any]]:
    return [
        {"t": round(at, 3), "kind": MARKER_KINDS[kind][0], "label": MARKER_KINDS[kind][1]}
        for at, kind, _ in timeline
        if kind in MARKER_KINDS
    ]


def _json_for_script(data: Any) -> str:
    """JSON safe inside ``<script>``: no ``</`` can close the element early."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def render_report(
    *,
    timeline: Sequence[tuple[float, str, str]],
    samples: Sequence[Mapping[str, float]],
    summary: Mapping[str, Any],
    error: str = "",
) -> str:
    """The report as one HTML string (see the module docstring for what it shows)."""
    data = {
        "samples": [dict(s) for s in samples],
        "markers": _markers(timeline),
    }
    ok = bool(summary.get("ok"))
    status = "completed" if ok else "failed"
    banner = f'<p class="error">The demo failed: {_esc(error)}</p>' if error else ""
    return _PAGE.format(
        status=status,
        status_class="ok" if ok else "failed",
        seconds=_esc(summary.get("seconds", "")),
        banner=banner,
        summary=_summary_table(summary),
        nodeclaims=_nodeclaim_table(nodeclaim_rows(timeline)),
        timeline=_timeline_table(timeline),
        data=_json_for_script(data),
        script=_SCRIPT,
        style=_STYLE,
    )


def write_report(
    *,
    path: Path,
    timeline: Sequence[tuple[float, str, str]],
    samples: Sequence[Mapping[str, float]],
    summary: Mapping[str, Any],
    error: str = "",
) -> Path:
    """Write :func:`render_report` to ``path`` (UTF-8, parent directories created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(timeline=timeline, samples=samples, summary=summary, error=error), encoding="utf-8")
    return path


_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1d2330; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.ok { color: #1a7f37; } .failed { color: #c62828; } .error { background: #fdecea; padding: 8px 12px; }
table { border-collapse: collapse; font-size: 12.5px; } th, td { border: 1px solid #d8dde6; padding: 3px 7px; }
th { background: #f3f5f9; text-align: left; } tr.decision td { background: #fff8e6; }
#summary th { width: 220px; } #chart { border: 1px solid #d8dde6; background: #fff; }
.legend span { display: inline-block; margin-right: 16px; } .swatch { width: 18px; height: 3px;
  display: inline-block; vertical-align: middle; margin-right: 5px; }
"""

_SCRIPT = r"""
(function () {
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var svg = document.getElementById("chart");
  var NS = "http://www.w3.org/2000/svg";
  var W = 1000, H = 380, L = 52, R = 70, T = 20, B = 42;
  var s = data.samples, m = data.markers;
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    svg.appendChild(e); return e;
  }
  var tMax = 1;
  s.forEach(function (p) { tMax = Math.max(tMax, p.t); });
  m.forEach(function (p) { tMax = Math.max(tMax, p.t); });
  var yMax = 1, cMax = 0;
  s.forEach(function (p) {
    yMax = Math.max(yMax, p.pending || 0, p.running || 0, p.nodes || 0);
    cMax = Math.max(cMax, p.cost || 0);
  });
  yMax = Math.ceil(yMax * 1.15); cMax = cMax > 0 ? cMax * 1.25 : 0.1;
  function x(t) { return L + (W - L - R) * t / tMax; }
  function y(v) { return H - B - (H - T - B) * v / yMax; }
  function yc(v) { return H - B - (H - T - B) * v / cMax; }
  el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fbfcfe", stroke: "#c9d0dc"});
  var step = tMax > 120 ? 20 : tMax > 40 ? 10 : 5;
  for (var t = 0; t <= tMax; t += step) {
    el("line", {x1: x(t), x2: x(t), y1: T, y2: H - B, stroke: "#eef1f6"});
    el("text", {x: x(t), y: H - B + 16, "text-anchor": "middle", "font-size": 11, fill: "#555"}, t + "s");
  }
  var yStep = Math.max(1, Math.ceil(yMax / 6));
  for (var v = 0; v <= yMax; v += yStep) {
    el("text", {x: L - 8, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#555"}, String(v));
  }
  for (var i = 0; i <= 4; i++) {
    var c = cMax * i / 4;
    el("text", {x: W - R + 8, y: yc(c) + 4, "font-size": 11, fill: "#6a3fb5"}, "$" + c.toFixed(3));
  }
  el("text", {x: L, y: H - 6, "font-size": 11, fill: "#555"}, "seconds since the demo started");
  el("text", {x: W - R + 8, y: T - 6, "font-size": 11, fill: "#6a3fb5"}, "USD/hour");
  el("text", {x: L - 8, y: T - 6, "font-size": 11, fill: "#555", "text-anchor": "end"}, "count");
  var drawn = 0, markers = 0, open = null;
  m.forEach(function (k) {
    if (k.kind === "interruption") { open = k.t; }
    if (k.kind === "drain" && open !== null) {
      el("rect", {x: x(open), y: T, width: Math.max(2, x(k.t) - x(open)), height: H - T - B,
                  fill: "#f9a825", "fill-opacity": 0.18, "class": "marker-band"});
      open = null;
    }
  });
  m.forEach(function (k, i) {
    var color = {interruption: "#e65100", drain: "#f9a825", disruption: "#00838f", error: "#c62828"}[k.kind];
    el("line", {x1: x(k.t), x2: x(k.t), y1: T, y2: H - B, stroke: color, "stroke-width": 1.5,
                "stroke-dasharray": "5 3", "class": "marker marker-" + k.kind});
    var right = x(k.t) > L + 0.8 * (W - L - R);
    el("text", {x: x(k.t) + (right ? -4 : 4), y: T + 14 + 13 * (i % 4), "font-size": 11, fill: color,
                "text-anchor": right ? "end" : "start"}, k.label);
    markers++;
  });
  var series = [
    {key: "pending", label: "pending pods", color: "#ef6c00", axis: y},
    {key: "running", label: "running pods", color: "#2e7d32", axis: y},
    {key: "nodes", label: "nodes", color: "#1565c0", axis: y},
    {key: "cost", label: "cost (USD/hour)", color: "#6a3fb5", axis: yc, dash: "6 3"}
  ];
  var legend = document.getElementById("legend");
  series.forEach(function (se) {
    var pts = [], prev = null;
    s.forEach(function (p) {
      if (p[se.key] === undefined || p[se.key] === null) { return; }
      var px = x(p.t).toFixed(1), py = se.axis(p[se.key]).toFixed(1);
      if (prev !== null) { pts.push(px + "," + prev); }
      pts.push(px + "," + py); prev = py;
    });
    if (pts.length < 2) { return; }
    el("polyline", {points: pts.join(" "), fill: "none", stroke: se.color, "stroke-width": 2.2,
                    "stroke-dasharray": se.dash || "none", "data-series": se.key, "class": "series"});
    drawn++;
    var item = document.createElement("span");
    item.innerHTML = '<i class="swatch" style="background:' + se.color + '"></i>' + se.label;
    legend.appendChild(item);
  });
  svg.setAttribute("data-series-drawn", String(drawn));
  svg.setAttribute("data-markers-drawn", String(markers));
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Nodesmith demo report</title>
<style>{style}</style>
</head>
<body>
<h1>Nodesmith demo: <span class="{status_class}">{status}</span> in {seconds}s</h1>
<p>Embedded AWS (moto) and Kubernetes API emulator; the reconcile and interruption Lambdas ran unchanged.
Shaded: from the spot interruption warning on EventBridge to the interruption Lambda returning
(cordon, replacement launch, drain).</p>
{banner}
<h2>Timeline</h2>
<div class="legend" id="legend"></div>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="1000" height="380" viewBox="0 0 1000 380"
     role="img" aria-label="pending and running pods, nodes and cost per hour over time"
     data-series-drawn="0" data-markers-drawn="0"></svg>
<noscript><p>The chart needs JavaScript; the tables below hold the same story.</p></noscript>
<h2>Summary</h2>
{summary}
<h2>NodeClaims</h2>
{nodeclaims}
<h2>Decisions and events</h2>
{timeline}
<script type="application/json" id="report-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""
