#!/usr/bin/env python3
"""Checks hllm's documentation (README.md and docs/*.md) against the repository.

1. Snippets. A fenced code block preceded by a comment line

       <!-- snippet: examples/tour.cpp tour:load -->

   must be exactly the lines of that file's region `tour:load`, i.e. the lines after the marker
   line `// [tour:load]` up to the next `// [tour:end]` (or `// [end]`), with their common
   indentation removed. Without a region name the block must be the whole file. So code shown
   in the docs is code that CI compiles and runs: it cannot rot.

2. Links. Every relative link and image, `[text](path)`, `[text](path#anchor)`, `[text](#anchor)`
   or a reference definition `[label]: path`, outside code, must resolve: the path (relative to
   the Markdown file) exists, and an anchor names a heading of the target Markdown file by
   GitHub's slug rules (or an explicit `<a id="...">`). Links with a scheme (https:, mailto:)
   are not checked.

Prints `docs: N links, M snippets checked` and exits 0, or prints each problem as FILE:LINE:
message and exits 1. Standard library only. Usage: tools/check_docs.py [--root REPO]
"""

import argparse
import bisect
import re
import sys
import unicodedata
from pathlib import Path

SNIPPET = re.compile(r"^\s*<!--\s*snippet:\s*(\S+)(?:\s+(\S+))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
REGION_END = re.compile(r"^\s*//\s*\[(?:[\w.-]+:)?end\]\s*$")
# [text](target "title") and ![alt](target); target without spaces, or in <angle brackets>.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
HTML_HREF = re.compile(r"<a\s+(?:[^>]*\s)?href\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def code_spans_removed(line):
    """The line with inline code spans blanked, so links inside `code` are not links."""
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(2)
                continue
            yield number, line
        elif m and m.group(2).startswith(fence[0]) and len(m.group(2)) >= len(fence) \
                and not m.group(3).strip():
            fence = None


def heading_text(raw):
    """A heading's rendered text: links become their text, code and emphasis marks go."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?<!\w)([*_])(.+?)\1(?!\w)", r"\2", text)
    return text


def github_slug(text):
    """GitHub's heading anchor (github-slugger): lower case, punctuation dropped, spaces → '-'."""
    out = []
    for ch in text.strip().lower():
        if ch == " ":
            out.append("-")
        elif ch in "-_" or unicodedata.category(ch)[0] in "LNM":
            out.append(ch)
    return "".join(out)


def anchors_of(path, cache={}):
    """Every anchor a Markdown file defines: heading slugs (duplicates numbered) and <a id>."""
    if path not in cache:
        seen = {}
        anchors = set()
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if m:
                slug = github_slug(heading_text(m.group(2)))
                count = seen.get(slug, 0)
                seen[slug] = count + 1
                anchors.add(slug if count == 0 else f"{slug}-{count}")
            for a in HTML_ANCHOR.findall(line):
                anchors.add(a)
        cache[path] = anchors
    return cache[path]


def region_lines(path, region):
    """The lines of `region` in the file at path (or the whole file), common indent removed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if region is not None:
        begin = [i for i, line in enumerate(lines) if line.strip() == f"// [{region}]"]
        if len(begin) != 1:
            raise ValueError(f"region '{region}' is marked {len(begin)} times in {path.name} "
                             f"(want exactly one '// [{region}]' line)")
        end = next((i for i in range(begin[0] + 1, len(lines)) if REGION_END.match(lines[i])),
                   None)
        if end is None:
            raise ValueError(f"region '{region}' in {path.name} has no '// [...:end]' line")
        lines = lines[begin[0] + 1:end]
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] if line.strip() else "" for line in lines]


def check_snippets(md, root, text, problems):
    """Checks every snippet-marked code block of one Markdown file; returns how many."""
    lines = text.splitlines()
    count = 0
    for i, line in enumerate(lines):
        m = SNIPPET.match(line)
        if not m:
            continue
        where = f"{md.relative_to(root)}:{i + 1}"
        count += 1
        source, region = root / m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if fence is None:
            problems.append(f"{where}: a snippet marker must be followed by a fenced code block")
            continue
        indent, mark = fence.group(1), fence.group(2)
        k = j + 1
        block = []
        while k < len(lines) and not (lines[k].strip().startswith(mark) and
                                      not lines[k].strip()[len(mark):].strip()):
            block.append(lines[k][len(indent):] if lines[k].startswith(indent) else lines[k])
            k += 1
        if k == len(lines):
            problems.append(f"{where}: the code block after the snippet marker is not closed")
            continue
        if not source.is_file():
            problems.append(f"{where}: snippet source {m.group(1)} does not exist")
            continue
        try:
            expected = region_lines(source, region)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if [b.rstrip() for b in block] != [e.rstrip() for e in expected]:
            first = next((n for n, (a, b) in enumerate(zip(block, expected)) if a != b),
                         min(len(block), len(expected)))
            name = m.group(1) + (f" {region}" if region else "")
            problems.append(
                f"{where}: the code block differs from {name} at its line {first + 1}:\n"
                f"    docs:   {block[first] if first < len(block) else '(end of block)'!r}\n"
                f"    source: {expected[first] if first < len(expected) else '(end of region)'!r}\n"
                f"  copy the region into the block again")
    return count


def prose_paragraphs(text):
    """(line numbers, lines) of each run of consecutive non-blank lines outside code blocks: a
    link's text may wrap onto the next line, so links are looked for in whole paragraphs."""
    numbers, lines = [], []
    for number, line in prose_lines(text):
        if numbers and (not line.strip() or number != numbers[-1] + 1):
            yield numbers, lines
            numbers, lines = [], []
        if line.strip():
            numbers.append(number)
            lines.append(line)
    if numbers:
        yield numbers, lines


def paragraph_targets(numbers, lines):
    """(line number, target) of every link in one paragraph, wrapped or not."""
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    joined = code_spans_removed(" ".join(lines))

    def line_of(position):
        return numbers[bisect.bisect_right(starts, position) - 1]

    found = [(line_of(m.start()), m.group(1).strip("<>")) for m in INLINE_LINK.finditer(joined)]
    found += [(line_of(m.start()), m.group(1)) for m in HTML_HREF.finditer(joined)]
    for number, line in zip(numbers, lines):
        found += [(number, t.strip("<>")) for t in REFERENCE_DEF.findall(code_spans_removed(line))]
    return found


def check_links(md, root, text, problems):
    """Checks every relative link of one Markdown file; returns how many it checked."""
    count = 0
    for numbers, lines in prose_paragraphs(text):
        for number, target in paragraph_targets(numbers, lines):
            if SCHEME.match(target) or target.startswith("//"):
                continue
            count += 1
            where = f"{md.relative_to(root)}:{number}"
            path_part, _, anchor = target.partition("#")
            dest = md if not path_part else (md.parent / path_part).resolve()
            if not dest.exists():
                problems.append(f"{where}: link '{target}': {path_part} does not exist")
                continue
            try:
                dest.relative_to(root.resolve())
            except ValueError:
                problems.append(f"{where}: link '{target}' leaves the repository")
                continue
            if anchor:
                if dest.is_dir() or dest.suffix.lower() != ".md":
                    problems.append(f"{where}: link '{target}': anchors are only checked in "
                                    f"Markdown files, and {path_part} is not one")
                elif anchor not in anchors_of(dest):
                    problems.append(f"{where}: link '{target}': no heading in "
                                    f"{dest.relative_to(root.resolve())} has the anchor "
                                    f"#{anchor}")
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the repository root (default: this script's parent folder)")
    args = parser.parse_args()
    root = args.root.resolve()
    files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    problems = []
    links = snippets = 0
    for md in files:
        if not md.is_file():
            problems.append(f"{md.relative_to(root)}: missing")
            continue
        text = md.read_text(encoding="utf-8")
        snippets += check_snippets(md, root, text, problems)
        links += check_links(md, root, text, problems)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"docs: {len(problems)} problem(s) in {len(files)} files", file=sys.stderr)
        return 1
    print(f"docs: {links} links, {snippets} snippets checked in {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
