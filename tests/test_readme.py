"""The README stays a door, not the house: short, its results block in place, and every relative link in it
and in the pages of docs/ pointing at a file that exists (docs/REPORT.md is generated: its links are the
build's)."""
import re

import pytest

from pagedbench.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_LINES = 250
RESULTS_START = "<!-- results: written by `make report` from the report's records; do not edit here -->"
RESULTS_END = "<!-- /results -->"

# [text](target) or [text](target "title"); images (![alt](target)) match too. Code spans are removed first,
# so a link written as an example inside backticks is not followed.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`+[^`\n]*`+")


def pages() -> list:
    return [README] + sorted(p for p in DOCS.glob("*.md") if p.name != "REPORT.md")


def relative_links(text: str) -> list[str]:
    """The targets of `text`'s markdown links that name a file of this repository: no scheme (http, https,
    mailto, ...), no bare #anchor; each without its #anchor or ?query."""
    text = CODE_SPAN.sub("", CODE_BLOCK.sub("", text))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0].split("?", 1)[0])
    return targets


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, (f"README.md has {len(lines)} lines, over {MAX_LINES}: move the detail "
                                     "into a page under docs/ and link it")


def test_the_readme_keeps_its_results_block():
    text = README.read_text()
    assert text.count(RESULTS_START) == 1 and text.count(RESULTS_END) == 1, (
        "README.md must hold exactly one results block, which `make report` rewrites")
    assert text.index(RESULTS_START) < text.index(RESULTS_END)


def test_the_markers_are_the_ones_the_build_writes_between():
    from pagedbench.results.report import headline

    assert (headline.README_START, headline.README_END) == (RESULTS_START, RESULTS_END)


def test_the_link_finder_finds_what_it_should():
    text = ("[a](docs/x.md) [b](docs/y.md#part) [c](https://example.com) [d](mailto:a@b.c) [e](#top) "
            "![f](docs/figures/g.png \"title\") `[h](not/a/link.md)`\n```\n[i](in/a/block.md)\n```\n")
    assert relative_links(text) == ["docs/x.md", "docs/y.md", "docs/figures/g.png"]


def test_there_are_pages_to_check():
    assert README in pages() and len(pages()) > 1


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file(page):
    missing = [t for t in relative_links(page.read_text()) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"
