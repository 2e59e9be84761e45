"""The README guides and docs/ references (issue 36): README.md stays short, its first sh block is the two
set-up commands, every relative link in README.md, CONTRIBUTING.md and docs/*.md resolves to a file (and an
#anchor to a heading of it), and every docs page starts with prose saying what a reader comes to it for."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

INSTALL = ("apt-get update && apt-get install -y python3-venv && python3 -m venv /opt/nodesleuth && "
           "/opt/nodesleuth/bin/pip install . && /opt/nodesleuth/bin/nodesleuth check")
TESTS = "bash .ci/run"

PENDING: set[str] = set()  # pages other branches add; empty once they are on main

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages():
    return [README, ROOT / "CONTRIBUTING.md"] + sorted(DOCS.glob("*.md"))


def prose_lines(text):
    """Lines outside fenced code blocks (links and headings inside code are not links or headings)."""
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for line in prose_lines(path.read_text()):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_readme_is_at_most_300_lines():
    n = len(README.read_text().splitlines())
    assert n <= 300, f"README.md has {n} lines; the reference belongs in docs/"


def test_readme_first_sh_block_is_the_two_set_up_commands():
    text = README.read_text()
    m = re.search(r"^```sh\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no ```sh block"
    lines = [l for l in m.group(1).splitlines() if l.strip()]
    assert lines == [INSTALL, TESTS], lines


def test_every_relative_link_resolves():
    bad, pending = [], []
    for page in pages():
        for line in prose_lines(page.read_text()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
                if not dest.exists():
                    (pending if rel in PENDING else bad).append(f"{page.relative_to(ROOT)}: {target}")
                    continue
                if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, bad
    # each pending page is linked from the README (so removing PENDING later is all it takes)
    linked = {t.partition("#")[0] for t in LINK.findall(README.read_text())}
    assert PENDING <= linked, PENDING - linked


def test_readme_links_every_docs_page():
    linked = {t.partition("#")[0] for t in LINK.findall(README.read_text())}
    missing = [p.name for p in DOCS.glob("*.md") if f"docs/{p.name}" not in linked]
    assert not missing, missing


def test_every_docs_page_starts_with_prose():
    assert sorted(DOCS.glob("*.md")), "docs/ has no pages"
    for page in sorted(DOCS.glob("*.md")):
        lines = [l for l in page.read_text().splitlines() if l.strip()]
        assert lines and lines[0].startswith("# "), f"{page.name}: no title"
        first = lines[1] if len(lines) > 1 else ""
        assert first and not re.match(r"^(#|```|~~~|\||- |\* |\d+\. |<)", first), \
            f"{page.name}: the first thing after the title is not a sentence: {first!r}"
        # a sentence: words and a full stop before the first heading
        body = []
        for l in lines[1:]:
            if l.startswith("#"):
                break
            body.append(l)
        para = " ".join(body)
        assert len(para.split()) >= 8 and "." in para, f"{page.name}: opening prose too short: {para!r}"
