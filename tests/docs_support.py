"""Reading the docs for tests/test_docs.py and tests/test_docs_links.py: the pages checked
(``DOC_FILES``: README.md and docs/*.md under ``ROOT``), ``blocks`` (a page as its fenced code
blocks and its paragraphs of prose), and the patterns for a fence, inline code and a Markdown
link. It knows nothing of what the pages must say."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+-]*)")
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def blocks(path: Path) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]]]:
    """A page as (first line number, language, code) for each fenced block and
    (first line number, text) for each paragraph of prose (lines joined by spaces)."""
    code: list[tuple[int, str, str]] = []
    prose: list[tuple[int, str]] = []
    fence, lang, start, body = None, "", 0, []
    para: list[str] = []
    para_start = 0

    def end_paragraph() -> None:
        if para:
            prose.append((para_start, " ".join(para)))
            para.clear()

    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            end_paragraph()
            fence, lang, start, body = m.group(1), m.group(2).lower(), n, []
        elif fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                code.append((start, lang, "\n".join(body)))
                fence = None
            else:
                body.append(line)
        elif not line.strip():
            end_paragraph()
        else:
            if not para:
                para_start = n
            para.append(line.strip())
    end_paragraph()
    return code, prose
