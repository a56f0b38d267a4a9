"""Chunking documents by their Markdown sections: heading paths, code fences, splitting long
sections at paragraph and sentence boundaries within both limits, overlap between neighbours,
Chinese text, and a property over arbitrary documents."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.chunking import ChunkLimits, TextChunk, chunk_text, count_tokens, search_text

SMALL = ChunkLimits(max_chars=300, max_tokens=40, overlap_chars=100)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _fits(chunk: TextChunk, limits: ChunkLimits) -> bool:
    return chunk.char_count <= limits.max_chars and chunk.token_count <= limits.max_tokens


def _sentences(n: int, start: int = 0) -> list[str]:
    return [f"Step {i} restarts worker {i} when the pool is busy." for i in range(start, start + n)]


# --- sections ---------------------------------------------------------------------------


def test_each_section_is_a_chunk_with_its_heading_path() -> None:
    text = (
        "# Runbook\nWhat this runbook is for.\n\n"
        "## Symptoms\nRequests time out.\n\n"
        "## Fix ##\nRestart the pool.\n\n"
        "### Detail\nWith the admin command.\n\n"
        "# Appendix\nLinks.\n"
    )

    chunks = chunk_text(text)

    assert [(c.heading_path, c.text) for c in chunks] == [
        ("Runbook", "What this runbook is for."),
        ("Runbook › Symptoms", "Requests time out."),
        ("Runbook › Fix", "Restart the pool."),
        ("Runbook › Fix › Detail", "With the admin command."),
        ("Appendix", "Links."),
    ]


def test_a_shallower_heading_after_a_skipped_level_replaces_the_deeper_one() -> None:
    chunks = chunk_text("# A\na\n### C\nc\n## B\nb\n")

    assert [c.heading_path for c in chunks] == ["A", "A › C", "A › B"]


def test_a_heading_inside_a_code_fence_is_part_of_the_body() -> None:
    text = "# Install\nRun this:\n```bash\n# not a heading\npip install x\n```\nThen restart.\n## Next\nmore"

    chunks = chunk_text(text)

    assert [c.heading_path for c in chunks] == ["Install", "Install › Next"]
    assert "# not a heading" in chunks[0].text
    assert "Then restart." in chunks[0].text


def test_text_before_the_first_heading_is_a_chunk_without_a_path() -> None:
    chunks = chunk_text("A preamble line.\n\n# First\nbody")

    assert [(c.heading_path, c.text) for c in chunks] == [("", "A preamble line."), ("First", "body")]


def test_lines_that_only_look_like_headings_are_body() -> None:
    chunks = chunk_text("# T\n#hashtag is not a heading\n####### seven marks are too many\n")

    assert len(chunks) == 1
    assert "#hashtag is not a heading" in chunks[0].text
    assert "####### seven marks are too many" in chunks[0].text


def test_windows_line_endings_are_handled_like_unix_ones() -> None:
    assert chunk_text("# A\r\nline one\r\n\r\n# B\r\nline two\r\n") == chunk_text("# A\nline one\n\n# B\nline two\n")


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n", "# Only\n## Headings\n"])
def test_nothing_to_say_gives_no_chunks(text: str) -> None:
    assert chunk_text(text) == []


# --- splitting long sections ------------------------------------------------------------


def test_a_long_section_is_split_at_paragraphs_and_every_chunk_is_within_both_limits() -> None:
    paragraphs = [" ".join(_sentences(3, start=3 * i)) for i in range(8)]  # each fits alone
    text = "# Pool\n" + "\n\n".join(paragraphs)

    chunks = chunk_text(text, SMALL)

    assert len(chunks) > 2
    assert all(_fits(c, SMALL) for c in chunks)
    assert {c.heading_path for c in chunks} == {"Pool"}
    for paragraph in paragraphs:  # a paragraph that fits is never cut
        assert any(paragraph in c.text for c in chunks), paragraph


def test_a_paragraph_too_long_for_one_chunk_is_split_at_sentence_ends() -> None:
    sentences = _sentences(30)
    text = "# Pool\n" + " ".join(sentences)  # one paragraph, about 1,500 characters

    chunks = chunk_text(text, SMALL)

    assert len(chunks) > 3
    assert all(_fits(c, SMALL) for c in chunks)
    assert all(c.text.endswith("busy.") for c in chunks)
    for sentence in sentences:
        assert any(sentence in _squash(c.text) for c in chunks), sentence


def test_the_tail_of_a_chunk_opens_the_next_chunk_of_the_same_section() -> None:
    text = "# Pool\n" + " ".join(_sentences(30))

    chunks = chunk_text(text, SMALL)

    assert len(chunks) > 3
    for before, after in itertools.pairwise(chunks):
        b, a = _squash(before.text), _squash(after.text)
        shared = next((b[i:] for i in range(len(b)) if a.startswith(b[i:])), "")
        # the shared part is whole sentences: at least the last one, within the overlap budget
        assert shared.endswith("busy."), (before.text, after.text)
        assert b != shared and b[: -len(shared)].endswith("busy. ")
        assert 0 < len(shared) <= SMALL.overlap_chars
        assert a != shared  # the next chunk goes on beyond the overlap


def test_no_overlap_is_carried_across_sections() -> None:
    first = " ".join(_sentences(20))
    second = " ".join(f"Note {i} is about the disk." for i in range(20))
    chunks = chunk_text(f"# One\n{first}\n# Two\n{second}", SMALL)

    opening_of_two = next(c for c in chunks if c.heading_path == "Two")
    assert opening_of_two.text.startswith("Note 0 is about the disk.")
    assert "worker" not in " ".join(c.text for c in chunks if c.heading_path == "Two")


def test_no_overlap_when_overlap_is_zero() -> None:
    limits = ChunkLimits(max_chars=300, max_tokens=40, overlap_chars=0)
    sentences = _sentences(30)

    chunks = chunk_text("# Pool\n" + " ".join(sentences), limits)

    # without overlap every sentence is in exactly one chunk
    assert sum(_squash(c.text).count("busy.") for c in chunks) == len(sentences)


def test_ordinals_count_from_zero_across_sections() -> None:
    text = "intro\n# One\n" + " ".join(_sentences(20)) + "\n# Two\nshort\n## Three\n" + " ".join(_sentences(20))

    chunks = chunk_text(text, SMALL)

    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert len(chunks) > 5


def test_chinese_sentences_are_split_at_their_punctuation_and_counted_by_character() -> None:
    sentences = [
        f"第{i}步：重启数据库连接池，然后观察延迟是否恢复。" if i % 3 else f"第{i}步出错了！" for i in range(40)
    ]
    sentences[5] = "为什么连接池会耗尽？"
    text = "# 连接池\n" + "".join(sentences)  # no spaces at all
    limits = ChunkLimits(max_chars=400, max_tokens=60, overlap_chars=50)

    chunks = chunk_text(text, limits)

    assert count_tokens("重启数据库连接池。") == 9  # one token per CJK character and punctuation mark
    assert len(chunks) > 5  # the token limit, not the 400 characters, decides
    assert all(c.char_count <= 400 and c.token_count <= 60 for c in chunks)
    assert all(c.text[-1] in "。！？" for c in chunks)
    for sentence in sentences:
        assert any(sentence in c.text.replace(" ", "").replace("\n", "") for c in chunks), sentence


@pytest.mark.parametrize(
    "monster",
    [
        "x" * 5_000,  # one "word", no boundary anywhere
        "word " * 1_500,  # spaces but no sentence end
        "数据" * 1_500,  # CJK without punctuation
        "!?" * 1_500,  # every character a token
    ],
    ids=["one-word", "no-sentence-end", "cjk", "punctuation"],
)
def test_a_huge_sentence_without_boundaries_is_still_cut_within_the_limits(monster: str) -> None:
    chunks = chunk_text("# Big\n" + monster, SMALL)

    assert len(chunks) > 1
    assert all(_fits(c, SMALL) for c in chunks)
    flat = monster.replace(" ", "")
    pieces = [c.text.replace(" ", "") for c in chunks]
    # nothing invented, nothing lost: each chunk is a piece of the text (neighbours may overlap)
    assert all(piece in flat for piece in pieces)
    assert flat.startswith(pieces[0]) and flat.endswith(pieces[-1])
    assert sum(map(len, pieces)) >= len(flat)


def test_cuts_in_running_text_fall_between_words() -> None:
    chunks = chunk_text("# Big\n" + "alpha beta gamma " * 300, SMALL)

    assert all(set(c.text.split()) <= {"alpha", "beta", "gamma"} for c in chunks)


def test_default_limits_keep_a_normal_section_whole() -> None:
    body = " ".join(_sentences(10))

    chunks = chunk_text("# Pool\n" + body)

    assert [c.text for c in chunks] == [body]
    assert chunks[0].char_count == len(body)


# --- limits, tokens and the indexed text --------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_chars": 199},
        {"max_tokens": 31},
        {"overlap_chars": -1},
        {"max_chars": 200, "overlap_chars": 100},
        {"overlap_chars": 600},
    ],
)
def test_limits_that_cannot_work_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="chunk limits"):
        ChunkLimits(**kwargs)


def test_the_smallest_workable_limits_are_accepted() -> None:
    limits = ChunkLimits(max_chars=200, max_tokens=32, overlap_chars=99)

    assert (limits.max_chars, limits.max_tokens, limits.overlap_chars) == (200, 32, 99)
    assert ChunkLimits(overlap_chars=0).overlap_chars == 0


def test_tokens_are_words_and_single_cjk_characters_and_marks() -> None:
    assert count_tokens("db.pool max_size 数据库") == 7  # db . pool max_size 数 据 库
    assert count_tokens("   ") == 0


def test_search_text_puts_where_the_chunk_is_before_what_it_says() -> None:
    assert search_text("Disk runbook", "Fix › Detail", "Delete old logs.") == (
        "Disk runbook › Fix › Detail\nDelete old logs."
    )
    assert search_text("Disk runbook", "", "Delete old logs.") == "Disk runbook\nDelete old logs."
    assert search_text("", "", "Delete old logs.") == "Delete old logs."


# --- properties ---------------------------------------------------------------------------

limits_strategy = st.builds(
    lambda chars, tokens, overlap: ChunkLimits(chars, tokens, overlap % (chars // 2)),
    st.integers(200, 500),
    st.integers(32, 100),
    st.integers(0, 1_000),
)

_word = st.one_of(
    st.text("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_", min_size=1, max_size=12),
    st.text("数据库连接池耗尽磁盘满了重启", min_size=1, max_size=6),
).flatmap(lambda w: st.sampled_from([w, w + ".", w + "!", w + "?", w + "。", w + "；", w + ","]))
_body_line = st.lists(_word, min_size=1, max_size=30).map(" ".join)
_line = st.one_of(
    _body_line,
    _body_line,
    _body_line,
    st.just(""),
    st.just("```"),
    st.tuples(st.integers(1, 6), _body_line).map(lambda t: "#" * t[0] + " " + t[1]),
)


def _body_words(text: str) -> list[str]:
    """The whitespace-separated words of the lines that are not headings."""
    words: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            continue
        words.extend(line.split())
    return words


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(_line, max_size=120), limits=limits_strategy)
def test_every_chunk_fits_and_every_word_of_the_body_is_kept(lines: list[str], limits: ChunkLimits) -> None:
    text = "\n".join(lines)

    chunks = chunk_text(text, limits)

    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(_fits(c, limits) for c in chunks)
    words = _body_words(text)
    chunk_words = [set(c.text.split()) for c in chunks]
    for word in words:
        assert any(word in ws for ws in chunk_words), word
    # and nothing that was not in the body turns up in a chunk (no heading, no broken word)
    assert set().union(*chunk_words) <= set(words)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=3_000), limits=limits_strategy)
def test_any_text_gives_non_empty_chunks_within_the_limits(text: str, limits: ChunkLimits) -> None:
    chunks = chunk_text(text, limits)

    assert all(c.text.strip() == c.text and c.text for c in chunks)
    assert all(_fits(c, limits) for c in chunks)
    if not text.strip():
        assert chunks == []


def test_a_heading_line_full_of_spaces_is_parsed_in_linear_time() -> None:
    # "# a" + 5,000 spaces + "b" took minutes: the lazy title regex backtracked over the spaces.
    text = "# Disk" + " " * 50_000 + "full ##\n\nWrites fail.\n"

    started = time.perf_counter()
    chunks = chunk_text(text)

    assert time.perf_counter() - started < 1.0
    assert [(c.heading_path, c.text) for c in chunks] == [("Disk" + " " * 50_000 + "full", "Writes fail.")]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="# \tax\u00a0", max_size=16))
def test_a_heading_reads_as_the_markdown_heading_rule_says(line: str) -> None:
    """The reference: the regex the chunker used before (correct, but cubic on long lines)."""
    reference = re.match(r"^(#{1,6})\s+(.+?)\s*#*\s*$", line)
    chunks = chunk_text(f"{line}\nbody")
    expected = reference.group(2).strip() if reference else ""
    assert chunks[0].heading_path == expected
