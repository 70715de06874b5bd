"""``nodesmith demo --report PATH.html`` writes a self-contained page that a browser renders offline:
the timeline chart draws its four series (pending and running pods, nodes, cost per hour) with the
interruption and its drain marked, and the NodeClaims and decisions are in tables.

The page is opened as a new user would: the CLI runs the demo in its own process, then headless
Chromium (Debian's ``chromium``; this module's set-up installs it with ``apt-get`` when missing, as
CI runs as root on a fresh machine) loads the file with every host unresolvable, so anything the
page tried to fetch would fail. ``NODESMITH_UPDATE_SCREENSHOT=1`` also refreshes
``docs/demo-report.png`` (the README's picture) from the same run.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo-report")]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "demo-report.png"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no network at view time: every lookup fails
]


def _find_chromium() -> str | None:
    for candidate in ("chromium", "chromium-browser"):
        found = shutil.which(candidate)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def _install_chromium() -> str:
    """``apt-get install chromium``; returns why it could not, or '' when it did."""
    if not shutil.which("apt-get"):
        return "apt-get is not available (not a Debian-based machine)"
    if os.geteuid() != 0:
        return "not running as root, so apt-get cannot install packages"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            return f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-400:]}"
    return ""


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the Chromium binary, installing Debian's ``chromium`` package first when it is missing."""
    found = _find_chromium()
    if found is None:
        why = _install_chromium()
        found = _find_chromium()
        if found is None:
            pytest.skip(f"headless Chromium is needed to render the report and could not be installed: {why}")
    return found


@dataclass
class Rendered:
    html: str
    dom: str
    screenshot: bytes


def _chrome(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def rendered(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rendered]:
    work = tmp_path_factory.mktemp("demo-report")
    report = work / "out" / "demo.html"
    cli = Path(sys.executable).parent / "nodesmith"
    command = [str(cli)] if cli.exists() else [sys.executable, "-c", "from nodesmith.cli.main import main; main()"]
    demo = subprocess.run(
        [*command, "demo", "--quiet", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=work,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert report.is_file()

    dom = _chrome(chromium, work / "profile-dom", "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    png = work / "report.png"
    shot = _chrome(chromium, work / "profile-shot", "--window-size=1100,1400", f"--screenshot={png}", report.as_uri())
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    if os.environ.get("NODESMITH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(png, SCREENSHOT)
    yield Rendered(html=report.read_text(encoding="utf-8"), dom=dom.stdout, screenshot=png.read_bytes())


class _Elements(HTMLParser):
    """Collects (tag, attributes) of every element of a document."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))


def _elements(document: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Elements()
    parser.feed(document)
    return parser.elements


def test_the_page_needs_nothing_from_the_network(rendered: Rendered) -> None:
    elements = _elements(rendered.html)
    fetching = [(tag, attrs) for tag, attrs in elements if {"src", "href"} & set(attrs) or tag in {"link", "iframe"}]
    assert fetching == []
    assert "@import" not in rendered.html and "url(" not in rendered.html


def test_the_chart_drew_its_four_series_in_the_browser(rendered: Rendered) -> None:
    elements = _elements(rendered.dom)
    (chart,) = [attrs for tag, attrs in elements if tag == "svg" and attrs.get("id") == "chart"]
    assert chart["data-series-drawn"] == "4"  # set by the page's script once it drew
    series = {attrs["data-series"]: attrs["points"] for tag, attrs in elements if tag == "polyline"}
    assert set(series) == {"pending", "running", "nodes", "cost"}
    for name, points in series.items():
        assert len(points.split()) >= 4, name
        assert all(re.fullmatch(r"-?[\d.]+,-?[\d.]+", p) for p in points.split()), name
    running_heights = {float(p.split(",")[1]) for p in series["running"].split()}
    assert len(running_heights) >= 2  # the line moves: pods came and went


def test_the_interruption_and_its_drain_are_marked_on_the_chart(rendered: Rendered) -> None:
    classes = [attrs.get("class", "") for _, attrs in _elements(rendered.dom)]
    assert "marker marker-interruption" in classes
    assert "marker marker-drain" in classes
    assert "marker-band" in classes  # the shaded span from the warning to the drained node


def test_the_tables_list_the_nodeclaims_and_the_decisions(rendered: Rendered) -> None:
    nodeclaims = rendered.dom.split('<table id="nodeclaims">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(default-[a-z0-9]+)</td>", nodeclaims)
    assert len(rows) >= 2  # the first capacity and the interruption's replacement
    assert len(re.findall(r"<td>i-[0-9a-f]+</td>", nodeclaims)) == len(rows)
    assert "spot interrupted at" in nodeclaims
    timeline = rendered.dom.split('<table id="timeline">', 1)[1]
    for reason in ("SpotInterrupted", "Launched", "Nominated", "EventBridge"):
        assert f"<td>{reason}</td>" in timeline, reason


def test_the_screenshot_is_a_page_sized_png(rendered: Rendered) -> None:
    png = rendered.screenshot
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert (width, height) == (1100, 1400)
    assert len(png) > 50_000  # a drawn page, not a blank one
