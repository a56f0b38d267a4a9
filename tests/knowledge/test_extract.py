"""Text out of uploaded files: Markdown and plain text (UTF-8, BOM, GB18030), HTML (headings
become Markdown headings), real PDFs built in the test, every refusal with its code and reason,
and hostile files (nested headings, a PDF bomb) read in time linear in their size."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pytest
from pypdf import PdfReader, PdfWriter

from knowledge.chunking import chunk_text
from knowledge.extract import Extracted, ExtractionError, content_type_for, extract
from knowledge.failures import DocumentFailure
from tests.knowledge.pdfs import make_pdf, make_pdf_bomb


def refusal(filename: str, data: bytes, code: DocumentFailure | None = None) -> str:
    with pytest.raises(ExtractionError) as caught:
        extract(filename, data)
    assert code is None or caught.value.code == code
    reason = caught.value.reason
    assert reason == str(caught.value)
    assert reason and reason[0].islower() and "Traceback" not in reason
    return reason


# --- Markdown and plain text ------------------------------------------------------------


def test_markdown_title_is_the_first_top_level_heading() -> None:
    data = b"Some preface.\n\n## Not this one\n\n# Disk full ##\n\nWrites fail.\n\n# Later heading\n"

    got = extract("disk.md", data)

    assert got == Extracted(title="Disk full", text=data.decode().strip(), content_type="text/markdown")


def test_the_filename_stem_is_the_title_when_there_is_no_heading() -> None:
    got = extract("notes/pool-exhaustion.v2.txt", b"The pool ran out of connections.\n")

    assert got.title == "pool-exhaustion.v2"
    assert got.content_type == "text/plain"
    assert got.text == "The pool ran out of connections."


def test_gb18030_chinese_text_is_decoded() -> None:
    text = "# 数据库连接池耗尽\n\n请求超时，日志里出现“连接池已满”。"
    data = text.encode("gb18030")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # the test file really is not UTF-8

    got = extract("连接池.md", data)

    assert got.title == "数据库连接池耗尽"
    assert got.text == text


def test_a_utf8_byte_order_mark_is_stripped() -> None:
    got = extract("bom.md", "\ufeff# Überschrift\nInhalt".encode())

    assert got.text == "# Überschrift\nInhalt"
    assert got.title == "Überschrift"


def test_line_endings_are_normalised_and_blank_runs_collapsed() -> None:
    got = extract("a.txt", b"one\r\ntwo\rthree\n\n\n\n\nfour\n")

    assert got.text == "one\ntwo\nthree\n\nfour"


@pytest.mark.parametrize(
    "data",
    [b"Setup:\n```bash\n# install the agent\npip install agent\n```\n\nBody text.", b"#\nBody text."],
    ids=["comment-in-code-fence", "lone-hash-line"],
)
def test_only_a_real_heading_names_a_markdown_file(data: bytes) -> None:
    assert chunk_text(data.decode())[0].heading_path == ""  # chunking sees no heading either

    assert extract("setup-guide.md", data).title == "setup-guide"


def test_a_long_title_is_cut_to_300_characters() -> None:
    got = extract("a.md", ("# " + "t" * 400 + "\nbody").encode())

    assert got.title == "t" * 300


# --- HTML ---------------------------------------------------------------------------------

HTML = b"""<!doctype html>
<html><head><title> Disk runbook </title>
<style>.alert { color: red }</style><script>var tracking = "script text";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<h1>Disk <em>full</em></h1>
<p>Writes fail with
   <code>ENOSPC</code>.</p>
<h2>Fix</h2>
<ul><li>Delete old logs</li><li>Grow the volume</li></ul>
<h3>Check</h3><p>Run df -h.<br>Then du -sh.</p>
<noscript>enable javascript</noscript>
<footer>Copyright footer</footer>
<script>console.log("more script text")</script>
</body></html>"""


def test_html_keeps_the_title_and_the_visible_text_only() -> None:
    got = extract("disk.html", HTML)

    assert got.title == "Disk runbook"
    assert got.content_type == "text/html"
    for hidden in ("script text", "color: red", "Home", "About", "Copyright footer", "enable javascript"):
        assert hidden not in got.text


def test_html_headings_become_markdown_headings_and_blocks_their_own_lines() -> None:
    got = extract("disk.htm", HTML)

    lines = got.text.splitlines()
    assert "# Disk full" in lines
    assert "## Fix" in lines
    assert "### Check" in lines
    assert "Delete old logs" in lines
    assert "Grow the volume" in lines
    assert "Run df -h." in lines and "Then du -sh." in lines  # <br> is a line break
    # a paragraph is a block of its own, however its source was wrapped
    blocks = [" ".join(block.split()) for block in got.text.split("\n\n")]
    assert "Writes fail with ENOSPC." in blocks


def test_html_is_chunked_by_its_headings() -> None:
    chunks = chunk_text(extract("disk.html", HTML).text)

    assert [c.heading_path for c in chunks] == ["Disk full", "Disk full › Fix", "Disk full › Fix › Check"]
    assert "Delete old logs\n\nGrow the volume" in chunks[1].text


def test_a_wrapped_html_title_is_one_line() -> None:
    got = extract("a.html", b"<html><head><title>\n    Disk runbook\n    | Wiki\n</title></head><p>x</p></html>")

    assert got.title == "Disk runbook | Wiki"


def test_html_without_a_title_is_named_by_its_first_h1_else_by_its_file() -> None:
    assert extract("a.html", b"<h2>Intro</h2><p>x</p><h1>Main heading</h1><p>y</p>").title == "Main heading"
    assert extract("page-name.html", b"<p>just a paragraph</p>").title == "page-name"


def test_html_of_only_scripts_has_no_text() -> None:
    reason = refusal("a.html", b"<html><head><script>x()</script></head><body><nav>menu</nav></body></html>")

    assert "no text" in reason


def test_html_table_cells_stay_separate_words() -> None:
    got = extract("t.html", b"<table><tr><th>Metric</th><th>Limit</th></tr><tr><td>disk</td><td>90%</td></tr></table>")

    assert "disk" in got.text.split()
    assert "Metric" in got.text.split()


def test_a_shell_comment_in_html_pre_is_not_a_section_heading() -> None:
    html = b"<h1>Restart</h1><p>Do this:</p><pre># stop the worker first\nsystemctl stop worker</pre><p>Done.</p>"

    chunks = chunk_text(extract("r.html", html).text)

    assert [c.heading_path for c in chunks] == ["Restart"]


# --- PDF ------------------------------------------------------------------------------------


def test_pdf_text_comes_out_page_by_page() -> None:
    data = make_pdf([["Disk full runbook", "Writes fail with ENOSPC."], ["Page two: grow the volume."]])
    assert len(PdfReader(io.BytesIO(data)).pages) == 2  # a valid PDF, not just bytes that start like one

    got = extract("Disk Runbook.pdf", data)

    assert got.content_type == "application/pdf"
    assert got.title == "Disk Runbook"
    assert "Disk full runbook" in got.text
    assert "Writes fail with ENOSPC." in got.text
    assert got.text.index("ENOSPC") < got.text.index("Page two: grow the volume.")
    assert "\n\n" in got.text  # pages are separated like paragraphs


def test_pdf_title_comes_from_its_metadata() -> None:
    got = extract("scan0001.pdf", make_pdf([["Body text."]], title="Connection pool exhaustion"))

    assert got.title == "Connection pool exhaustion"


def test_a_blank_pdf_title_falls_back_to_the_file_name() -> None:
    got = extract("scan0001.pdf", make_pdf([["Body text."]], title="   "))

    assert got.title == "scan0001"


def test_a_pdf_without_text_is_refused() -> None:
    assert "no text" in refusal("blank.pdf", make_pdf([[]]))


def test_an_encrypted_pdf_is_refused() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["secret plan"]]))))
    writer.encrypt("hunter2", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)

    assert "encrypted" in refusal("locked.pdf", out.getvalue())


@pytest.mark.parametrize(
    "data",
    [b"just some text, not a pdf", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, b"%PDF-1.7\nthis is not really a pdf"],
    ids=["text", "png", "broken"],
)
def test_a_pdf_that_is_not_a_pdf_is_refused(data: bytes) -> None:
    reason = refusal("report.pdf", data)

    assert "PDF" in reason


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["report.docx", "archive.tar.gz", "README", "image.PNG"])
def test_unknown_file_types_are_refused_with_the_allowed_list(filename: str) -> None:
    reason = refusal(filename, b"some text")

    assert "unsupported file type" in reason
    assert ".md" in reason and ".pdf" in reason


def test_the_type_is_decided_by_the_extension_in_any_case() -> None:
    assert content_type_for("A.MD") == "text/markdown"
    assert content_type_for("dir/x.Markdown") == "text/markdown"
    assert content_type_for("x.text") == "text/plain"
    assert content_type_for("x.HTM") == "text/html"
    assert content_type_for("backup.tar.pdf") == "application/pdf"
    with pytest.raises(ExtractionError, match=r"'\(none\)'"):
        content_type_for("Makefile")


@pytest.mark.parametrize("filename", ["a.md", "a.txt", "a.html", "a.pdf"])
def test_an_empty_file_is_refused(filename: str) -> None:
    assert refusal(filename, b"") == "the file is empty"


def test_whitespace_only_text_is_refused() -> None:
    assert "no text" in refusal("a.md", b" \n\r\n\t ")


@pytest.mark.parametrize("filename", ["a.txt", "a.md", "a.html"])
def test_nul_bytes_mean_binary_data(filename: str) -> None:
    assert "binary" in refusal(filename, b"text\x00more text")


@pytest.mark.parametrize("data", [b"\x80\xff abc", b"\xff\xfe\xfd", "caf\xe9 au lait".encode("latin-1")])
def test_bytes_that_decode_as_neither_utf8_nor_gb18030_are_refused(data: bytes) -> None:
    assert "neither UTF-8 nor GB18030" in refusal("a.txt", data)


# --- hostile files ------------------------------------------------------------------------


def fastest(fn: Callable[[], object], *, repeat: int = 2) -> float:
    """The best of ``repeat`` wall-clock timings: the machine may be busy with other work."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def test_nested_html_headings_are_read_in_linear_time_each_its_own_heading() -> None:
    # 8,000 unclosed <h1> took 28 s: each heading's text was gathered from its whole subtree.
    # 8x the input: linear is ~8x the time, quadratic ~64x; the wide gap (and the best of three)
    # keeps a busy machine's noise, which doubles a small run's time at times, from deciding it
    small, large = b"<h1>step " * 2_000, b"<h1>step " * 16_000

    took_small = fastest(lambda: extract("nested.html", small), repeat=3)
    took_large = fastest(lambda: extract("nested.html", large), repeat=3)

    assert took_large < 6.0
    assert took_large / max(took_small, 0.05) < 24
    text = extract("nested.html", large).text
    # As a browser parses it: a heading inside a heading ends the outer one.
    assert text.splitlines().count("# step") == 16_000


def test_a_heading_nested_in_a_heading_ends_it_and_the_rest_is_body() -> None:
    got = extract("page.html", b"<h1>Outer <b>title</b><h2>Inner</h2>after the inner one</h1><p>Body.</p>")

    assert got.text == "# Outer title\n\n## Inner\n\nafter the inner one\n\nBody."


def test_a_markdown_title_line_full_of_spaces_is_read_in_linear_time() -> None:
    data = b"# Disk" + b" " * 200_000 + b"full ##\n\nWrites fail.\n"

    assert fastest(lambda: extract("disk.md", data)) < 1.0
    assert extract("disk.md", data).title == "Disk full"


def test_a_pdf_bomb_is_refused_at_the_decompression_limit() -> None:
    bomb = make_pdf_bomb(80_000_000)  # a few hundred KB that inflate past pypdf's 75 MB limit
    assert len(bomb) < 1_000_000

    started = time.monotonic()
    reason = refusal("bomb.pdf", bomb, DocumentFailure.DECOMPRESSION_LIMIT)

    assert time.monotonic() - started < 15
    assert reason == "the PDF expands beyond the decompression limit"
