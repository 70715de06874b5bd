"""The README keeps its two first commands, and every relative link of the README and docs/ names a file that exists.

`make demo` and `make test` are the README's first two commands: the team and CI's instructions rely on them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_begins_with_make_demo_then_make_test() -> None:
    commands = [line.split("#")[0].strip() for line in (REPO / "README.md").read_text().splitlines()
                if line.startswith("make ")]  # fmt: skip
    assert commands[:2] == ["make demo", "make test"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = [
        target
        for target, _anchor in _LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == [], f"{page.relative_to(REPO)} links to missing files"


def test_the_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs").glob("*.md")):
        if page.name != "team-brief.md":
            assert f"(docs/{page.name})" in readme, page.name
