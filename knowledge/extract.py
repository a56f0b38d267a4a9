"""Text out of an uploaded file: Markdown, plain text, HTML and PDF.

HTML headings become Markdown headings, so every format is chunked the same way by section.
The type is decided by the file's extension and confirmed by its content (a ``.pdf`` must
start like a PDF, a text file must decode and hold no NUL bytes); anything else is refused
with a stable code and a reason that is safe to show.

Everything here takes time linear in the input (hostile files included: deeply nested
markup, very long lines); even so, the service runs it in a child process under a hard time
and memory limit (``knowledge.isolation``), because the parsers underneath are not ours.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from knowledge.failures import DocumentFailure

if TYPE_CHECKING:
    from bs4 import BeautifulSoup
    from bs4.element import PageElement, Tag

TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}
MAX_TEXT_CHARS = 2_000_000
MAX_PDF_PAGES = 1_000

_MD_TITLE = re.compile(r"#[ \t]+(\S.*)")
_BLANK_RUNS = re.compile(r"\n{3,}")
_INLINE_SPACE = re.compile(r"[ \t\u00a0]+")
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_BLOCKS = frozenset(["p", "li", "blockquote", "tr", "dt", "dd", "div", "section", "article", "table", "ul", "ol"])
_PRE_END = "\n```\n\n"
_HTML_SKIPPED = frozenset(["head", "script", "style", "noscript", "template", "nav", "footer", "svg"])


class ExtractionError(Exception):
    """The file cannot be turned into text. ``code`` is stable; ``reason`` is safe to show."""

    def __init__(self, code: DocumentFailure, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Extracted:
    title: str
    text: str
    content_type: str


def content_type_for(filename: str) -> str:
    suffix = PurePath(filename).suffix.lower()
    try:
        return TYPES[suffix]
    except KeyError:
        allowed = ", ".join(sorted(TYPES))
        raise ExtractionError(
            DocumentFailure.UNSUPPORTED_TYPE, f"unsupported file type {suffix or '(none)'!r}; allowed: {allowed}"
        ) from None


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise ExtractionError(DocumentFailure.BINARY_CONTENT, "the file holds binary data, not text")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ExtractionError(DocumentFailure.UNKNOWN_ENCODING, "the text is neither UTF-8 nor GB18030")


def _first_heading(text: str) -> str:
    """The first level-1 Markdown heading outside code fences, as the chunker reads them."""
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (match := _MD_TITLE.fullmatch(line.strip())):
            # the shortest title that leaves only closing marks (" ##") behind; in Python, as a
            # lazy regex tries every end and is quadratic on a line of spaces
            title = match.group(1)
            return title[: max(1, len(title.rstrip(" \t#")))]
    return ""


def _markdown(data: bytes) -> tuple[str, str]:
    text = _decode(data)
    return _first_heading(text), text


def _html(data: bytes) -> tuple[str, str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_decode(data), "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    lines, in_code = [], False
    for line in "".join(_html_text(soup)).splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            lines.append("```")
        else:
            lines.append(line.rstrip() if in_code else _INLINE_SPACE.sub(" ", line).strip())
    body = "\n".join(lines)
    return title or _first_heading(body), body


def _html_text(soup: BeautifulSoup) -> Iterator[str]:
    """The page as Markdown-ish text, in one walk over the tree (each node once, no recursion).

    Headings become ``#`` lines, blocks are separated by blank lines, ``<pre>`` is fenced,
    ``<br>`` breaks the line and table cells are spaced. A heading inside a heading ends the
    outer one, as a browser's parser would: nested headings stay separate lines instead of each
    repeating all the text below it, which made such a page quadratic.
    """
    from bs4.element import CData, NavigableString, Tag

    string_types = soup.interesting_string_types or {NavigableString, CData}
    heading: tuple[int, list[str]] | None = None
    pre_depth = 0

    def end_heading() -> Iterator[str]:
        nonlocal heading
        if heading is not None:
            level, words = heading
            text = " ".join(" ".join(words).split())
            yield f"\n\n{'#' * level} {text}\n\n" if text else "\n\n"
            heading = None

    # (element, its remaining children, what its end adds); inside a heading only words count
    stack: list[tuple[Tag, Iterator[PageElement], str]] = [(soup, iter(soup.contents), "")]
    while stack:
        parent, children, closing = stack[-1]
        child = next(children, None)
        if child is None:  # the end of ``parent``
            stack.pop()
            if parent.name in _HTML_HEADINGS:
                yield from end_heading()
            elif closing == _PRE_END:
                pre_depth -= 1
                if not pre_depth:
                    yield closing
            else:
                yield closing
            continue
        if not isinstance(child, Tag):
            if type(child) in string_types:  # text and CDATA; not comments, doctypes, scripts
                if heading is not None:
                    heading[1].append(str(child))
                else:
                    yield str(child)
            continue
        name, closing = child.name, ""
        if name in _HTML_SKIPPED:
            continue
        if name in _HTML_HEADINGS:
            yield from end_heading()
            heading = (_HTML_HEADINGS[name], [])
        elif heading is None:
            if name == "br":
                yield "\n"
            elif name in ("td", "th"):
                closing = " "
            elif name == "pre":  # a fence, so a "# comment" inside is not a heading
                if not pre_depth:
                    yield "\n\n```\n"
                pre_depth += 1
                closing = _PRE_END
            elif name in _HTML_BLOCKS:
                yield "\n\n"
                closing = "\n\n"
        stack.append((child, iter(child.contents), closing))


def _pdf(data: bytes) -> tuple[str, str]:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    if not data.lstrip()[:5] == b"%PDF-":
        raise ExtractionError(DocumentFailure.NOT_A_PDF, "the file is not a PDF")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ExtractionError(DocumentFailure.PDF_ENCRYPTED, "the PDF is encrypted")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise ExtractionError(DocumentFailure.PDF_TOO_MANY_PAGES, f"the PDF has more than {MAX_PDF_PAGES} pages")
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
        title = str(meta.title) if meta and meta.title else ""
    except (ExtractionError, MemoryError):
        raise
    except LimitReachedError:  # pypdf's guard against compression bombs
        raise ExtractionError(
            DocumentFailure.DECOMPRESSION_LIMIT, "the PDF expands beyond the decompression limit"
        ) from None
    except Exception:  # noqa: BLE001 - a parser of untrusted bytes fails in every way it can
        raise ExtractionError(DocumentFailure.PDF_UNREADABLE, "the PDF cannot be read") from None
    return title, "\n\n".join(page.strip() for page in pages if page.strip())


def extract(filename: str, data: bytes) -> Extracted:
    """The title and text of ``data``, named ``filename``; raises :class:`ExtractionError`."""
    content_type = content_type_for(filename)
    if not data:
        raise ExtractionError(DocumentFailure.EMPTY_FILE, "the file is empty")
    if content_type == "application/pdf":
        title, text = _pdf(data)
    elif content_type == "text/html":
        title, text = _html(data)
    else:
        title, text = _markdown(data)
    text = _BLANK_RUNS.sub("\n\n", text.replace("\r\n", "\n").replace("\r", "\n")).strip()
    if not text:
        raise ExtractionError(DocumentFailure.NO_TEXT, "no text could be extracted from the file")
    if len(text) > MAX_TEXT_CHARS:
        raise ExtractionError(
            DocumentFailure.TEXT_TOO_LONG, f"the extracted text is longer than {MAX_TEXT_CHARS} characters"
        )
    title = " ".join(title.split()) or PurePath(filename).stem
    title = title[:300]
    return Extracted(title=title, text=text, content_type=content_type)
