"""The README and docs/ stand alone: every relative link resolves, to a file and, with `#`, to a heading.

Anchors are GitHub's: the heading in lower case, punctuation but `-` and `_`
dropped, spaces turned into `-`.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import PROJECT_ROOT

README_MAX_LINES = 300
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


def pages() -> list[Path]:
    return [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved}")
        elif fragment and (resolved.suffix != ".md" or fragment not in anchors(resolved)):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


def test_every_relative_link_resolves() -> None:
    broken = {str(p.relative_to(PROJECT_ROOT)): b for p in pages() if (b := broken_links(p))}
    assert not broken, broken


def test_every_docs_page_is_in_the_index() -> None:
    index = (PROJECT_ROOT / "docs" / "README.md").read_text()
    listed = {target.partition("#")[0] for target in LINK.findall(index)}
    missing = [p.name for p in sorted((PROJECT_ROOT / "docs").glob("*.md")) if p.name != "README.md"]
    assert [name for name in missing if name not in listed] == []


def test_the_readme_reads_in_minutes() -> None:
    lines = len((PROJECT_ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material to docs/"


def test_the_checker_finds_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## `merge --json`\n\n[ok](#merge---json) [self](a.md#top)\n")
    (tmp_path / "b.md").write_text("[gone](missing.md) [no heading](a.md#nowhere) [web](https://x.org/y)\n")
    assert broken_links(tmp_path / "a.md") == []
    assert [b.split(":")[0] for b in broken_links(tmp_path / "b.md")] == ["missing.md", "a.md#nowhere"]
