"""Text out of an uploaded file: Markdown, plain text, HTML and PDF.

HTML headings become Markdown headings, so every format is chunked the same way by section.
The type is decided by the file's extension and confirmed by its content (a ``.pdf`` must
start like a PDF, a text file must decode and hold no NUL bytes); anything else is refused
with a reason that is safe to show.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import PurePath

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

_MD_TITLE = re.compile(r"#[ \t]+(\S.*?)[ \t#]*")
_BLANK_RUNS = re.compile(r"\n{3,}")
_INLINE_SPACE = re.compile(r"[ \t\u00a0]+")
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_HTML_BLOCKS = ["p", "li", "blockquote", "tr", "dt", "dd", "div", "section", "article", "table", "ul", "ol"]


class ExtractionError(Exception):
    """The file cannot be turned into text. ``reason`` is safe to show to the uploader."""

    def __init__(self, reason: str) -> None:
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
        raise ExtractionError(f"unsupported file type {suffix or '(none)'!r}; allowed: {allowed}") from None


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise ExtractionError("the file holds binary data, not text")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ExtractionError("the text is neither UTF-8 nor GB18030")


def _first_heading(text: str) -> str:
    """The first level-1 Markdown heading outside code fences, as the chunker reads them."""
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (match := _MD_TITLE.fullmatch(line.strip())):
            return match.group(1)
    return ""


def _markdown(data: bytes) -> tuple[str, str]:
    text = _decode(data)
    return _first_heading(text), text


def _html(data: bytes) -> tuple[str, str]:
    from bs4 import BeautifulSoup
    from bs4.element import NavigableString

    soup = BeautifulSoup(_decode(data), "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(["head", "script", "style", "noscript", "template", "nav", "footer", "svg"]):
        tag.decompose()
    for heading in soup.find_all(list(_HTML_HEADINGS)):
        marks = "#" * _HTML_HEADINGS[heading.name]
        heading.replace_with(NavigableString(f"\n\n{marks} {heading.get_text(' ', strip=True)}\n\n"))
    for br in soup.find_all("br"):
        br.replace_with(NavigableString("\n"))
    for cell in soup.find_all(["td", "th"]):
        cell.insert_after(NavigableString(" "))
    for pre in soup.find_all("pre"):  # a fence, so a "# comment" inside is not a heading
        pre.insert_before(NavigableString("\n\n```\n"))
        pre.insert_after(NavigableString("\n```\n\n"))
    for block in soup.find_all(_HTML_BLOCKS):
        block.insert_before(NavigableString("\n\n"))
        block.insert_after(NavigableString("\n\n"))
    lines, in_code = [], False
    for line in soup.get_text().splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            lines.append("```")
        else:
            lines.append(line.rstrip() if in_code else _INLINE_SPACE.sub(" ", line).strip())
    body = "\n".join(lines)
    return title or _first_heading(body), body


def _pdf(data: bytes) -> tuple[str, str]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    if not data.lstrip()[:5] == b"%PDF-":
        raise ExtractionError("the file is not a PDF")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ExtractionError("the PDF is encrypted")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise ExtractionError(f"the PDF has more than {MAX_PDF_PAGES} pages")
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
        title = str(meta.title) if meta and meta.title else ""
    except ExtractionError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ExtractionError("the PDF cannot be read") from exc
    return title, "\n\n".join(page.strip() for page in pages if page.strip())


def extract(filename: str, data: bytes) -> Extracted:
    """The title and text of ``data``, named ``filename``; raises :class:`ExtractionError`."""
    content_type = content_type_for(filename)
    if not data:
        raise ExtractionError("the file is empty")
    if content_type == "application/pdf":
        title, text = _pdf(data)
    elif content_type == "text/html":
        title, text = _html(data)
    else:
        title, text = _markdown(data)
    text = _BLANK_RUNS.sub("\n\n", text.replace("\r\n", "\n").replace("\r", "\n")).strip()
    if not text:
        raise ExtractionError("no text could be extracted from the file")
    if len(text) > MAX_TEXT_CHARS:
        raise ExtractionError(f"the extracted text is longer than {MAX_TEXT_CHARS} characters")
    title = " ".join(title.split()) or PurePath(filename).stem
    title = title[:300]
    return Extracted(title=title, text=text, content_type=content_type)
