"""The demo report rebuilds each NodeClaim's story from the Events in the timeline -- launched on which
instance at what price, registered on which node, initialized, and how it ended (interrupted before it
registered, removed as empty, disrupted by drift) -- and escapes every text it shows."""

from __future__ import annotations

from nodesmith.cli.report import nodeclaim_rows, render_report

CONDITION = "Status condition transitioned, Type: {type}, Status: True, "
LAUNCH = CONDITION.format(type="Launched") + "instance {iid} (c6a.xlarge, us-east-1c, spot, $0.0519/h)"
REGISTERED = CONDITION.format(type="Registered") + "node {node}"
INITIALIZED = CONDITION.format(type="Initialized") + "node {node}"
TIMELINE = [
    (1.0, "NodeClaim", "default-aaaaa created by the reconcile Lambda"),
    (1.0, "Launched", "NodeClaim/default-aaaaa: " + LAUNCH.format(iid="i-0aaaaaaaaaaaaaaaa")),
    (5.0, "EventBridge", "EC2 Spot Instance Interruption Warning for i-0aaaaaaaaaaaaaaaa"),
    (6.0, "SpotInterrupted", "Node/ip-10-0-0-1.ec2.internal: Spot interruption warning for i-0aaaaaaaaaaaaaaaa: soon"),
    (6.5, "SQS -> Lambda", "interruption handler: 1 record(s), 0 failed"),
    (7.0, "NodeClaim", "default-bbbbb created by the reconcile Lambda"),
    (7.0, "Launched", "NodeClaim/default-bbbbb: " + LAUNCH.format(iid="i-0bbbbbbbbbbbbbbbb")),
    (8.0, "Registered", "NodeClaim/default-bbbbb: " + REGISTERED.format(node="ip-10-0-0-2.ec2.internal")),
    (8.0, "Initialized", "NodeClaim/default-bbbbb: " + INITIALIZED.format(node="ip-10-0-0-2.ec2.internal")),
    (9.0, "NodeClaim", "default-ccccc created by the reconcile Lambda"),
    (9.0, "Launched", "NodeClaim/default-ccccc: " + LAUNCH.format(iid="i-0cccccccccccccccc")),
    (9.5, "Registered", "NodeClaim/default-ccccc: " + REGISTERED.format(node="ip-10-0-0-3.ec2.internal")),
    (12.0, "Emptiness", "2 empty node(s) removed: ip-10-0-0-2.ec2.internal, ip-10-0-0-3.ec2.internal"),
]  # fmt: skip


def test_each_nodeclaim_has_its_instance_node_and_ending() -> None:
    rows = {r.name: r for r in nodeclaim_rows(TIMELINE)}
    interrupted, emptied, other = rows["default-aaaaa"], rows["default-bbbbb"], rows["default-ccccc"]
    assert (interrupted.instance, interrupted.instance_type, interrupted.capacity_type, interrupted.price) == (
        "i-0aaaaaaaaaaaaaaaa",
        "c6a.xlarge",
        "spot",
        0.0519,
    )
    assert interrupted.registered is None and interrupted.ended == "spot interrupted at 6.0s"  # by instance id
    assert (emptied.node, emptied.registered, emptied.initialized) == ("ip-10-0-0-2.ec2.internal", 8.0, 8.0)
    assert emptied.ended == other.ended.replace("9.5", "12.0") == "removed as empty at 12.0s"


def test_the_page_escapes_what_it_shows_and_embeds_its_data() -> None:
    hostile = [*TIMELINE, (13.0, "FAILED", "DemoFailed: <script>alert(1)</script> & more")]
    page = render_report(
        timeline=hostile,
        samples=[{"t": 0.0, "pending": 0, "running": 0, "nodes": 0, "cost": 0.0}],
        summary={"ok": False, "seconds": 13.0},
        error="<b>boom</b>",
    )
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "&lt;b&gt;boom&lt;/b&gt;" in page and 'class="failed"' in page
    assert page.count("<script") == 2  # the data block and the drawing code, nothing injected
    assert '"kind":"interruption"' in page and '"kind":"drain"' in page and '"kind":"error"' in page


def test_a_static_nodepool_scale_down_is_told_as_such() -> None:
    scaled = [
        (1.0, "NodeClaim", "static-aaaaa created by the reconcile Lambda"),
        (1.0, "Launched", "NodeClaim/static-aaaaa: " + LAUNCH.format(iid="i-0aaaaaaaaaaaaaaaa")),
        (2.0, "Registered", "NodeClaim/static-aaaaa: " + REGISTERED.format(node="ip-10-0-0-1.ec2.internal")),
        (
            9.0,
            "DisruptionTerminating",
            'Node/ip-10-0-0-1.ec2.internal: Disrupting Node: Overprovisioned (static NodePool "static" scaled to '
            "1 replicas)",
        ),
    ]
    [row] = nodeclaim_rows(scaled)
    assert row.ended.startswith("static NodePool scale-down at 9.0s")
    assert 'static NodePool "static" scaled to 1 replicas' in row.ended
