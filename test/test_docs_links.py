"""Every relative link in the README, the changelog and docs/ resolves.

A link `[text](path)` or `[text](path#anchor)` (images too) must name a file or folder that
exists, relative to the file that holds the link; an anchor must be a heading of the target
file, made into a slug as GitHub does. Links to other sites (http, https, mailto) are not
checked, nor anything inside code spans or fenced code blocks.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the text may hold brackets one level deep.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = ("http://", "https://", "mailto:")


@dataclass(frozen=True)
class Link:
    """One relative link: the file holding it, its line (1-based) and its target as written."""

    source: Path
    line: int
    target: str


def _prose_lines(path: Path, blank_code_spans: bool = True) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks, code spans blanked unless
    asked not to (a heading's code is part of its anchor)."""
    lines = []
    fence = ""
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(raw)
        if match:
            if not fence:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = ""
            continue
        if not fence:
            text = _CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), raw) if blank_code_spans else raw
            lines.append((number, text))
    return lines


def relative_links(path: Path) -> list[Link]:
    """Every link in `path` that points into the repository (not to another site)."""
    links = []
    for number, text in _prose_lines(path):
        targets = [m.group(1) for m in _INLINE_LINK.finditer(text)]
        definition = _REFERENCE_DEFINITION.match(text)
        if definition:
            targets.append(definition.group(1))
        for written in targets:
            target = written.strip("<>")
            if target and not target.lower().startswith(_EXTERNAL):
                links.append(Link(path, number, target))
    return links


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, links and emphasis reduced to
    their text, every character but letters, digits, spaces, '-' and '_' dropped, spaces
    turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for _, raw in _prose_lines(path, blank_code_spans=False):
        match = _HEADING.match(raw)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def problem(link: Link) -> str | None:
    """What is wrong with `link`, or None when it resolves."""
    path_part, _, anchor = link.target.partition("#")
    target = (link.source.parent / unquote(path_part)).resolve() if path_part else link.source
    where = f"{_shown(link.source)}:{link.line}: ({link.target})"
    if not target.exists():
        return f"{where}: no file or folder {_shown(target)}"
    if not anchor:
        return None
    if target.is_dir() or target.suffix.lower() != ".md":
        return f"{where}: #{anchor} points into {_shown(target)}, which is not a Markdown file"
    known = anchors(target)
    if unquote(anchor).lower() in known:
        return None
    closest = difflib.get_close_matches(unquote(anchor).lower(), sorted(known), n=1)
    hint = f" (closest: #{closest[0]})" if closest else ""
    return f"{where}: no heading of {_shown(target)} has the anchor #{anchor}{hint}"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def test_the_documents_are_found() -> None:
    assert REPO / "README.md" in DOCUMENTS
    assert len(DOCUMENTS) > 3, DOCUMENTS


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(document: Path) -> None:
    problems = [p for p in map(problem, relative_links(document)) if p]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_slugs_follow_githubs_rules() -> None:
    assert github_slug("Measured (`carryon bench policy`)") == "measured-carryon-bench-policy"
    assert github_slug("Missing / limits") == "missing--limits"
    assert github_slug("7. Two machines: the arm's PC and a GPU box") == "7-two-machines-the-arms-pc-and-a-gpu-box"
    assert github_slug("The simulation harness (`carryon_sim/carryon_sim/harness/`)") == (
        "the-simulation-harness-carryon_simcarryon_simharness"
    )


def test_a_broken_link_and_a_broken_anchor_are_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A section\n\n[ok](#a-section) [gone](missing.md) [bad](#no-such)\n"
        "`[in code](missing.md)`\n\n```\n[in a fence](missing.md)\n# not a heading\n```\n",
        encoding="utf-8",
    )
    links = relative_links(page)
    assert [link.target for link in links] == ["#a-section", "missing.md", "#no-such"]
    found = [problem(link) for link in links]
    assert found[0] is None
    assert found[1] is not None and "no file or folder" in found[1] and "missing.md" in found[1]
    assert found[2] is not None and "#no-such" in found[2] and "not-a-heading" not in anchors(page)
