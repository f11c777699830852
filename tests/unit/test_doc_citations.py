"""Every § citation names exactly one heading of the document it cites (docs/README.md, "Citing").

A citation is `protocol.md §X`, `design.md §X` or `clients.md §X`, where X is a heading number
(`4`, `4.5`), optionally continued by further numbers of the same document (`protocol.md §7.1,
§7.2`, `protocol.md §6.4 / §8.2`) or a range (`protocol.md §4-§9`). Inside docs/<name>.md a bare
`§X` refers to <name>.md itself. Anywhere else a bare `§X` — and every old-style citation of the
documents that were never in this repository (`spec §N`, `DESIGN.md §N`, `real-clients`,
`platform-limits`) — is an error.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITED_DOCS = ("protocol.md", "design.md", "clients.md")
CODE_DIRS = ("app", "storage", "api", "cli", "pipeline", "bench", "tests", "migrations")
TOP_LEVEL_MD = ("README.md", "BENCHMARKS.md")
# docs/README.md explains the old citation forms and how they were mapped: it names them on
# purpose, so only the old-style check skips it.
OLD_STYLE_EXEMPT = {DOCS / "README.md"}

HEADING = re.compile(r"^#{1,6}[ \t]+(\d+(?:\.\d+)*)\.?[ \t]", re.MULTILINE)
NUMBER = r"§(\d+(?:\.\d+)*)"
SEPARATOR = r"\s*(?:,|/|\band\b|\bor\b)\s*"
RANGE = r"\s*[-–]\s*"  # noqa: RUF001 (an en dash is a range too)
CITATION = re.compile(
    r"(?<![\w/.-])(?P<doc>protocol|design|clients)\.md\s+"
    rf"{NUMBER}(?P<more>(?:(?:{SEPARATOR}|{RANGE}){NUMBER})*)"
)
CONTINUATION = re.compile(rf"(?P<sep>{SEPARATOR}|{RANGE}){NUMBER}")
ANY_SECTION = re.compile(NUMBER)
OLD_STYLE = {
    "spec §": re.compile(r"\bspec\s*\(?§"),
    "DESIGN": re.compile(r"\bDESIGN\b"),
    "real-clients": re.compile(r"real-clients"),
    "platform-limits": re.compile(r"platform-limits"),
}


def scanned_files() -> list[Path]:
    this = Path(__file__).resolve()
    files = [
        p
        for d in CODE_DIRS
        for p in sorted((ROOT / d).rglob("*.py"))
        if p.resolve() != this and "__pycache__" not in p.parts
    ]
    files += [ROOT / name for name in TOP_LEVEL_MD if (ROOT / name).exists()]
    files += sorted(DOCS.glob("*.md"))
    return files


def headings(doc: str) -> Counter[str]:
    return Counter(HEADING.findall((DOCS / doc).read_text(encoding="utf-8")))


HEADINGS = {doc: headings(doc) for doc in CITED_DOCS}


class Problems:
    """Offending lines, each reported once as `file:line: text` with what is wrong there."""

    def __init__(self) -> None:
        self._lines: dict[tuple[str, int], tuple[str, list[str]]] = {}

    def add(self, path: Path, text: str, pos: int, what: str) -> None:
        line_no = text.count("\n", 0, pos) + 1
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        line = text[start : None if end < 0 else end].strip()
        key = (str(path.relative_to(ROOT)), line_no)
        self._lines.setdefault(key, (line, []))[1].append(what)

    def check(self, title: str) -> None:
        if self._lines:
            pytest.fail(
                f"{len(self._lines)} line(s) with {title}:\n"
                + "\n".join(
                    f"{file}:{line_no}: {line}\n    " + "; ".join(whats)
                    for (file, line_no), (line, whats) in sorted(self._lines.items())
                ),
                pytrace=False,
            )


def key(number: str) -> tuple[int, ...]:
    return tuple(int(part) for part in number.split("."))


def citations(text: str, own_doc: str | None) -> Iterator[tuple[int, str, str, str | None]]:
    """(position, document, number, range start or None) for every cited number of `text`.

    A bare § is yielded with document `own_doc`, or "" when the text is not one of the cited
    documents (so the caller reports it)."""
    covered: set[int] = set()
    for m in CITATION.finditer(text):
        doc = f"{m['doc']}.md"
        yield m.start(), doc, m.group(2), None
        previous = m.group(2)
        for c in CONTINUATION.finditer(m["more"]):
            is_range = c["sep"].strip() in ("-", "–")  # noqa: RUF001
            yield m.start("more") + c.start(), doc, c.group(2), previous if is_range else None
            previous = c.group(2)
        covered.update(s.start() for s in ANY_SECTION.finditer(text, m.start(), m.end()))
    for s in ANY_SECTION.finditer(text):
        if s.start() not in covered:
            yield s.start(), own_doc or "", s.group(1), None


def test_every_cited_document_numbers_each_heading_once() -> None:
    problems = [
        f"docs/{doc}: heading {number} appears {count} times"
        for doc, counts in HEADINGS.items()
        for number, count in sorted(counts.items(), key=lambda item: key(item[0]))
        if count != 1
    ]
    empty = [f"docs/{doc}: no numbered heading" for doc, c in HEADINGS.items() if not c]
    assert not problems + empty, "\n".join(problems + empty)


def test_every_citation_names_exactly_one_heading() -> None:
    problems = Problems()
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        own = path.name if path.parent == DOCS and path.name in CITED_DOCS else None
        for pos, doc, number, range_start in citations(text, own):
            if not doc:
                problems.add(path, text, pos, f"bare §{number}: name its document")
                continue
            count = HEADINGS[doc][number]
            if count != 1:
                what = "no heading" if count == 0 else f"{count} headings"
                problems.add(path, text, pos, f"{doc} §{number}: {what}")
            if range_start is not None and key(range_start) >= key(number):
                problems.add(path, text, pos, f"{doc} §{range_start}-§{number}: empty range")
    problems.check("bad § citations")


def test_no_old_style_citation_remains() -> None:
    problems = Problems()
    for path in scanned_files():
        if path in OLD_STYLE_EXEMPT:
            continue
        text = path.read_text(encoding="utf-8")
        for name, pattern in OLD_STYLE.items():
            for m in pattern.finditer(text):
                problems.add(path, text, m.start(), f"old-style citation ({name})")
    problems.check(
        "old-style citations (map them with docs/citations.tsv to protocol.md, design.md, "
        "clients.md)"
    )


def test_the_citation_scanner_itself() -> None:
    found = [
        (doc, number, start)
        for _, doc, number, start in citations(
            "protocol.md §7.1, §7.2 and protocol.md §4-§9; design.md §6.4 / §8.2, see §3", None
        )
    ]
    assert found == [
        ("protocol.md", "7.1", None),
        ("protocol.md", "7.2", None),
        ("protocol.md", "4", None),
        ("protocol.md", "9", "4"),
        ("design.md", "6.4", None),
        ("design.md", "8.2", None),
        ("", "3", None),
    ]
    assert [n for _, _, n, _ in citations("(§2.3, design.md\n§5)", "protocol.md")] == ["5", "2.3"]
    assert [n for _, _, n, _ in citations("spec/real-clients.md §3", None)] == ["3"]
    assert OLD_STYLE["spec §"].search("the spec (§2.7, as Kafka)")
    assert not any(p.search("protocol.md §5.2") for p in OLD_STYLE.values())
