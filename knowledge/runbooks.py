"""Runbooks: Markdown procedures for the diagnosis agent, stored in the database and matched to
a question with BM25.

A runbook file is Markdown whose first heading ``# Title`` names it; everything after that line
is its body: a "When to use" paragraph (symptoms, log patterns), a line of Chinese keywords
(``关键词: …``) and
the sections ``## Workflow``, ``## Required evidence``, ``## Stop conditions`` and ``## Report
rules``. The files under ``knowledge/runbooks/`` ship with the service; :func:`load_runbooks`
(``python manage.py load_runbooks``) upserts them into :class:`knowledge.models.Runbook`, where
staff can edit or disable them in the admin. The files win: loading again overwrites an edit
made in the admin to a runbook whose file changed.

:class:`DatabaseRunbooks` is the service's :class:`harness.ports.RunbookSource`. It ranks the
enabled runbooks against the question with BM25 over title and body, read with the knowledge
side's own terms (:func:`knowledge.lexical.terms`: stemmed English words and identifier parts,
CJK bigrams), whatever model the service runs. Chinese questions meet English runbooks two ways:
by the bigrams of the runbook's own Chinese keywords, and by :data:`knowledge.lexical.EQUIVALENTS`,
which gives both the question and the runbook the English terms of the Chinese words they
contain, so "支付超时" finds the same procedures as "payments timing out". It notices edits
without a restart.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import DatabaseError, transaction
from django.db.models import Count, Max, Q
from django.utils.text import slugify

from harness import ports
from knowledge.lexical import equivalent_terms, terms
from knowledge.models import Runbook

__all__ = [
    "RUNBOOK_DIR",
    "SECTIONS",
    "DatabaseRunbooks",
    "LoadReport",
    "RunbookRejected",
    "index_terms",
    "load_runbooks",
    "missing_sections",
    "parse_runbook",
]

logger = logging.getLogger(__name__)

#: The runbooks shipped with the service.
RUNBOOK_DIR = Path(__file__).resolve().parent / "runbooks"

#: The sections every runbook should have, in order (``missing_sections`` reports the others).
SECTIONS = ("Workflow", "Required evidence", "Stop conditions", "Report rules")

_TITLE_MAX = Runbook._meta.get_field("title").max_length or 200
_SLUG_MAX = Runbook._meta.get_field("slug").max_length or 100
_H1 = re.compile(r"^#[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*$")


class RunbookRejected(ValueError):
    """A runbook that cannot be stored; ``reason`` says why, in words fit for a report."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# --- parsing -------------------------------------------------------------------------------


def parse_runbook(source: str | Path, slug: str | None = None) -> tuple[str, str, str]:
    """``(slug, title, body)`` of a runbook, from a file or from its Markdown text.

    ``source`` is a file when it is a :class:`~pathlib.Path`, or a one-line string naming an
    existing file; any other string is the Markdown itself. The title is the first level-one
    heading (``# Title``), which must come before any other text; the body is everything after
    it, with line endings normalised and surrounding blank lines removed. The slug is ``slug``
    when given, else the file name's stem, else the slugified title.

    Raises :class:`RunbookRejected` for an unreadable file, a missing title, an empty body or an
    invalid slug.
    """
    path = _as_path(source)
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise RunbookRejected("not UTF-8 text") from None
        except OSError as exc:
            raise RunbookRejected(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    else:
        text = str(source)
    title, body = _split_title(text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff"))
    if slug is None:
        slug = slugify(path.stem) if path is not None else slugify(title)
        if not slug:
            raise RunbookRejected("no slug can be made from the file name or title; name the file in ASCII")
    _check_slug(slug)
    return slug, title, body


def _as_path(source: str | Path) -> Path | None:
    if isinstance(source, Path):
        return source
    if "\n" in source or len(source) > 1024 or not source.strip():
        return None
    candidate = Path(source)
    try:
        return candidate if candidate.is_file() else None
    except OSError:
        return None


def _split_title(text: str) -> tuple[str, str]:
    lines = text.split("\n")
    first = next((number for number, line in enumerate(lines) if line.strip()), None)
    heading = _H1.match(lines[first]) if first is not None else None
    if first is None or heading is None:
        if first is not None and any(_H1.match(line) for line in lines[first + 1 :]):
            raise RunbookRejected("text before the '# Title' line")
        raise RunbookRejected("no title: the first line must be '# Title'")
    title = heading.group("title").strip()
    if len(title) > _TITLE_MAX:
        raise RunbookRejected(f"title longer than {_TITLE_MAX} characters")
    body = "\n".join(lines[first + 1 :]).strip("\n").rstrip()
    if not body.strip():
        raise RunbookRejected("no body after the title")
    return title, body


def _check_slug(slug: str) -> None:
    if len(slug) > _SLUG_MAX:
        raise RunbookRejected(f"slug longer than {_SLUG_MAX} characters")
    try:
        validate_slug(slug)
    except ValidationError:
        raise RunbookRejected(f"invalid slug {slug!r}: use letters, digits, hyphens and underscores") from None


def missing_sections(body: str) -> list[str]:
    """The standard sections (:data:`SECTIONS`) that ``body`` has no ``## Heading`` for."""
    present = {m.group(1).strip().lower() for m in re.finditer(r"^##[ \t]+(.+?)[ \t#]*$", body, re.M)}
    return [name for name in SECTIONS if name.lower() not in present]


# --- loading -------------------------------------------------------------------------------


@dataclass
class LoadReport:
    """What :func:`load_runbooks` did: slugs created, updated and unchanged; files rejected."""

    directory: Path
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.rejected)} rejected"
        )


def load_runbooks(directory: str | Path = RUNBOOK_DIR) -> LoadReport:
    """Upsert every ``*.md`` file of ``directory`` (not recursive) as a :class:`Runbook` row.

    A new slug creates a row; a changed title or body updates it (``enabled`` is left as staff
    set it); identical content is unchanged. Files that do not parse, or reuse a slug already
    taken by another file, are rejected with a reason. Rows without a file are left alone. All
    in one transaction. Raises :class:`NotADirectoryError` when ``directory`` is not one.
    """
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    report = LoadReport(directory=root)
    parsed: dict[str, tuple[str, str, str]] = {}
    for path in sorted(root.glob("*.md")):
        try:
            slug, title, body = parse_runbook(path)
        except RunbookRejected as exc:
            report.rejected.append((path.name, exc.reason))
            continue
        if slug in parsed:
            report.rejected.append((path.name, f"slug {slug!r} already used by {parsed[slug][0]}"))
            continue
        parsed[slug] = (path.name, title, body)
    with transaction.atomic():
        existing = Runbook.objects.select_for_update().in_bulk(list(parsed), field_name="slug")
        for slug, (_name, title, body) in parsed.items():
            row = existing.get(slug)
            if row is None:
                Runbook.objects.create(slug=slug, title=title, body=body)
                report.created.append(slug)
            elif (row.title, row.body) == (title, body):
                report.unchanged.append(slug)
            else:
                row.title, row.body = title, body
                row.save(update_fields=["title", "body", "updated_at"])
                report.updated.append(slug)
    return report


# --- matching ------------------------------------------------------------------------------


def index_terms(text: str) -> list[str]:
    """The terms BM25 sees for a text, repeated as often as they occur.

    :func:`knowledge.lexical.terms` (stemmed words, identifier parts such as ``hikari`` and
    ``pool`` from ``HikariPool``, CJK character bigrams) without numbers and single letters — in
    a question they are times and counts, not topics; then the English terms of the words and
    phrasings of :data:`knowledge.lexical.EQUIVALENTS` in the text, so a Chinese question meets
    the English log patterns of a runbook.
    """
    return [t for t in terms(text) if len(t) > 1 and not t.isdigit()] + equivalent_terms(text)


#: (row count, enabled count, latest updated_at): changes whenever a runbook is added, removed,
#: saved, enabled or disabled.
_Signature = tuple[int, int, datetime | None]


@dataclass(frozen=True)
class _Index:
    signature: _Signature | None
    runbooks: tuple[ports.Runbook, ...] = ()
    retriever: Any = None  # a bm25s.BM25 over ``runbooks``; None when there are none


_EMPTY = _Index(signature=None)


class DatabaseRunbooks:
    """A :class:`~harness.ports.RunbookSource` over the enabled :class:`Runbook` rows.

    ``match`` scores every enabled runbook with BM25 (title counted ``title_weight`` times) and
    returns, best first and at most ``limit``, the best when it scores at least ``min_score``
    and the next ones that score close to it or cover another part of the question (see
    :meth:`match`): one runbook for a clear question, several when the question spans topics or
    they fit alike, none when nothing is relevant. Scores are BM25's, so ``min_score`` is about
    "one distinctive term matched well" for a corpus of a few dozen runbooks.

    The index is built on first use and rebuilt when the runbooks' signature (count, enabled
    count, latest ``updated_at``) changes, checked at most every ``check_interval_s`` seconds:
    edits in the admin apply without a restart. Safe to share between threads. When the
    database cannot be read, the last index is used (empty before the first success).
    """

    def __init__(
        self,
        *,
        min_score: float = 1.0,
        relative_score: float = 0.5,
        novel_score: float = 1.5,
        title_weight: int = 2,
        check_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(min_score, novel_score) <= 0 or not 0 < relative_score <= 1 or title_weight < 1 or check_interval_s < 0:
            raise ValueError("scores > 0, 0 < relative_score <= 1, title_weight >= 1, check_interval_s >= 0")
        self.min_score = min_score
        self.relative_score = relative_score
        self.novel_score = novel_score
        self.title_weight = title_weight
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._index = _EMPTY
        self._checked_at = -math.inf

    def match(self, question: str, *, limit: int) -> Sequence[ports.Runbook]:
        """The runbooks that fit the question, best first, at most ``limit``; possibly none.

        The best runbook counts when it scores at least ``min_score``. Each next one, in score
        order, counts when it scores close to the best (at least ``relative_score`` times it),
        or when the question's terms that it explains better than the runbooks chosen so far
        (they score under half its score for the term) give it ``novel_score`` on their own: a
        question about two incidents gets both runbooks even when one matches more words.
        """
        if limit <= 0:
            return []
        scored = self._term_scores(question)
        if scored is None:
            return []
        books, per_term = scored
        totals = per_term.sum(axis=0)
        order = sorted(range(len(books)), key=lambda i: (-totals[i], books[i].slug))
        best = totals[order[0]]
        if best < self.min_score:
            return []
        chosen = [order[0]]
        explained = per_term[:, order[0]].copy()  # per term: the best score among the chosen
        for candidate in order[1:]:
            if len(chosen) >= limit or totals[candidate] < self.min_score:
                break
            column = per_term[:, candidate]
            novel = column[explained < column / 2].sum()
            if totals[candidate] >= best * self.relative_score or novel >= self.novel_score:
                chosen.append(candidate)
                explained = np.maximum(explained, column)
        return [books[i] for i in chosen]

    def ranked(self, question: str) -> list[tuple[ports.Runbook, float]]:
        """Every enabled runbook with a positive score for the question, best first, without
        any threshold: for tuning and for explaining a match."""
        scored = self._term_scores(question)
        if scored is None:
            return []
        books, per_term = scored
        totals = per_term.sum(axis=0)
        ranked = sorted(
            ((book, float(total)) for book, total in zip(books, totals, strict=True) if total > 0),
            key=lambda pair: (-pair[1], pair[0].slug),
        )
        return [(book, round(total, 4)) for book, total in ranked]

    def _term_scores(self, question: str) -> tuple[tuple[ports.Runbook, ...], np.ndarray[Any, Any]] | None:
        """The runbooks and a (query term x runbook) matrix of BM25 scores; ``None`` when no
        term of the question is in any runbook."""
        index = self._current()
        if index.retriever is None:
            return None
        ids = index.retriever.get_tokens_ids(list(dict.fromkeys(index_terms(question))))
        if not ids:
            return None
        per_term = np.vstack([index.retriever.get_scores_from_ids([token]) for token in ids]).astype(float)
        return index.runbooks, per_term

    def refresh(self) -> None:
        """Check the database now, rebuilding the index if the runbooks changed."""
        with self._lock:
            self._checked_at = -math.inf
        self._current()

    def _current(self) -> _Index:
        if self._clock() - self._checked_at < self.check_interval_s:
            return self._index
        with self._lock:
            now = self._clock()
            if now - self._checked_at < self.check_interval_s:
                return self._index
            try:
                signature = _signature()
                if signature != self._index.signature:
                    self._index = self._build(signature)
            except DatabaseError as exc:
                logger.warning("runbooks could not be read, using the last index: %s", type(exc).__name__)
            self._checked_at = now
            return self._index

    def _build(self, signature: _Signature) -> _Index:
        rows = Runbook.objects.filter(enabled=True).order_by("slug").values_list("slug", "title", "body")
        books = tuple(ports.Runbook(slug, title, body) for slug, title, body in rows)
        if not books:
            return _Index(signature)
        from knowledge.retrieval import bm25s  # imported when first needed, its logging tamed

        retriever = bm25s.BM25()
        corpus = [index_terms(book.title) * self.title_weight + index_terms(book.body) for book in books]
        retriever.index(corpus, show_progress=False)
        logger.info("runbook index built: %d runbooks", len(books))
        return _Index(signature, books, retriever)


def _signature() -> _Signature:
    totals = Runbook.objects.aggregate(
        rows=Count("id"), enabled=Count("id", filter=Q(enabled=True)), latest=Max("updated_at")
    )
    return int(totals["rows"]), int(totals["enabled"]), totals["latest"]
