"""Every relative link in README.md and docs/*.md reaches something: ``[text](path)`` names an
existing file or folder, and ``path#anchor`` (or ``#anchor``) one of that file's headings, slugged
as GitHub slugs them. The README points into docs/ for everything it no longer holds, so a page
renamed or a heading reworded would otherwise leave a dead link that nothing notices."""

import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")   # http:, https:, mailto: ...


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks: a ``# comment`` in a bash block is no heading."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text (link targets, HTML tags and markup gone),
    lower-cased, every character but letters, digits, ``_``, ``-`` and spaces dropped, spaces to ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page offers: its headings' slugs (a repeated slug gets -1, -2, ... as on GitHub)
    and explicit ``<a name=...>``/``<a id=...>`` targets."""
    seen: Counter = Counter()
    found = set()
    for _, line in prose_lines(path.read_text()):
        found |= set(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path):
    """(line number, target) of every inline link and image in a page's prose, code spans left out."""
    for number, line in prose_lines(path.read_text()):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, match.group(1).strip("<>")


def broken_links(path: Path) -> list[str]:
    """One line per relative link of ``path`` that reaches no file, or no heading of its file."""
    broken = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(path.parents[1]) if path.parent.name == 'docs' else path.name}:{number}"
        if not dest.exists():
            broken.append(f"{where}: {target}: no such file {dest}")
        elif anchor and (dest.is_dir() or dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{where}: {target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = broken_links(page)
    assert not broken, "\n".join(broken)


def test_the_readme_links_into_every_docs_page_it_moved_content_to():
    targets = {target.partition("#")[0] for _, target in links(REPO / "README.md")}
    for page in ("runs", "real-models", "studies", "clusters-and-gpus", "api", "methods", "testing",
                 "architecture", "commands", "metrics", "coverage", "notes"):
        assert f"docs/{page}.md" in targets, page
    assert sum(1 for page in pages() for _, target in links(page) if "#" in target) >= 25


def test_slugs_follow_github(tmp_path):
    assert slug("Checking a GPU machine: `grpolab doctor --gpu`") == "checking-a-gpu-machine-grpolab-doctor---gpu"
    assert slug("Methods from verl 0.9.1, and what is not covered") == "methods-from-verl-091-and-what-is-not-covered"
    assert slug("Claims and verdicts (`studies/claims/*.yaml`)") == "claims-and-verdicts-studiesclaimsyaml"
    assert slug("TRL's own settings (`train.trl`)") == "trls-own-settings-traintrl"
    assert slug("See [the runs page](runs.md) first") == "see-the-runs-page-first"
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Part\n\n## Part\n\n```bash\n# not a heading\n```\n")
    assert anchors(page) == {"title", "part", "part-1"}


def test_a_broken_file_or_anchor_is_reported(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "there.md").write_text("# There\n\n## A section\n")
    page = docs / "page.md"
    page.write_text("# Page\n\n[ok](there.md#a-section) [self](#page) [web](https://example.org/x.md)\n"
                    "`[in code](gone.md)`\n\n```\n[fenced](gone.md)\n```\n"
                    "[missing](gone.md) and [bad anchor](there.md#no-such-section)\n")
    assert broken_links(page) == [
        f"docs/page.md:9: gone.md: no such file {docs / 'gone.md'}",
        "docs/page.md:9: there.md#no-such-section: no heading with anchor #no-such-section in there.md"]
