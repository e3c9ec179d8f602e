"""The README stays a ten-minute page, and no relative link in the documentation is broken.

Fast: reads Markdown files only. A broken link fails with every broken link listed at once.
"""

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
README_LIMIT = 20 * 1024  # bytes

# [text](target) and ![alt](target), the target optionally in <…> and followed by a "title"
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text: str) -> list[str]:
    """The file's lines with fenced code blocks blanked (their links and headings are not Markdown)."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def without_code_spans(text: str) -> str:
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, spaces to '-', punctuation
    other than '-' and '_' dropped (letters, digits and combining marks of any script kept)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading reads as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = []
    for ch in text:
        if ch == " ":
            kept.append("-")
        elif ch.isalnum() or ch in "-_" or unicodedata.category(ch).startswith("M"):
            kept.append(ch)
    return "".join(kept)


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    text = without_code_spans("\n".join(prose_lines(path.read_text(encoding="utf-8"))))
    return [(text.count("\n", 0, m.start()) + 1, m.group(2).strip("<>")) for m in LINK.finditer(text)]


def broken_links(path: Path, check_anchors: bool) -> list[str]:
    broken = []
    where = path.relative_to(REPO)
    for line, target in links(path):
        if re.match(r"(?i)(https?:|mailto:)", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{where}:{line}: {target} -> no such file")
            continue
        if check_anchors and anchor and resolved.suffix == ".md" and resolved.is_file():
            if unquote(anchor) not in anchors(resolved):
                broken.append(f"{where}:{line}: {target} -> no heading with that anchor")
    return broken


def test_the_readme_is_at_most_20_kib():
    size = (REPO / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move detail to docs/"


def test_every_relative_link_in_the_documentation_resolves():
    # the anchor rule itself, on headings of the kind these pages have
    assert slug("World model and ψ adapter") == "world-model-and-ψ-adapter"
    assert slug("Two recipes: `paper` and `default`") == "two-recipes-paper-and-default"
    assert slug("Test-suite timings (2026-11-24 to -26)") == "test-suite-timings-2026-11-24-to--26"
    with_anchors = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    files_only = [*sorted((REPO / "bench" / "results").glob("*.md")),
                  *sorted((REPO / "deployments").glob("*.md"))]
    broken = [b for path in with_anchors for b in broken_links(path, check_anchors=True)]
    broken += [b for path in files_only for b in broken_links(path, check_anchors=False)]
    if broken:
        print("\n".join(broken))
    assert not broken, f"{len(broken)} broken link(s):\n" + "\n".join(broken)
