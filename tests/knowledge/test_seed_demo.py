"""``manage.py seed_demo``: the demo incidents' documents, runbooks, logs and business tables are
loaded, and loading them again changes nothing.

The business tables go to a scratch SQLite file (``EVIDENCE_SQL_URL`` overridden per test), and
the embedder is a small deterministic stand-in: the local MiniLM model would make these tests
slow without changing what they show (the embedder's own tests cover it).
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from knowledge.embeddings import Vectors, normalise
from knowledge.fixtures import merge, read_tables
from knowledge.logs.ingest import log_files
from knowledge.management.commands import seed_demo
from knowledge.models import Chunk, Document, DocumentStatus, LogEntry, Runbook
from knowledge.runbooks import RUNBOOK_DIR
from knowledge.scenarios import document_files

pytestmark = pytest.mark.django_db
SCENARIO = Path(__file__).resolve().parent / "scenario_fixtures"
SHIPPED_RUNBOOKS = sorted(Path(RUNBOOK_DIR).glob("*.md"))


class HashEmbedder:
    """Deterministic unit vectors from the text's hash: fast, and enough to see vectors stored."""

    name = "test:hash-8"
    dimension = 8

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:8], dtype=np.uint8) + 1.0 for t in texts]
        return normalise(np.array(rows, dtype=np.float32).reshape(len(texts), self.dimension))


@pytest.fixture
def embedder(monkeypatch: pytest.MonkeyPatch) -> HashEmbedder:
    fake = HashEmbedder()
    monkeypatch.setattr("knowledge.backends.embedder", lambda: fake)
    return fake


@pytest.fixture
def business_db(settings: Any, tmp_path: Path) -> Path:
    path = tmp_path / "business.sqlite3"
    settings.EVIDENCE_SQL_URL = f"sqlite:///{path}"
    return path


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", "--quiet", stdout=out, stderr=StringIO())
    return out.getvalue()


def business_tables(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        counts = {name: conn.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in names}
    conn.close()
    return counts


def counts() -> dict[str, Any]:
    return {
        "documents": sorted(Document.objects.values_list("id", "sha256", "status", "chunk_count")),
        "chunks": Chunk.objects.count(),
        "logs": LogEntry.objects.count(),
        "log_sources": sorted(set(LogEntry.objects.values_list("source", flat=True))),
        "runbooks": sorted(Runbook.objects.values_list("slug", "body")),
    }


# --- the shipped demo incidents --------------------------------------------------------------


def test_seed_demo_loads_the_shipped_incidents_and_a_second_run_changes_nothing(
    business_db: Path, embedder: HashEmbedder
) -> None:
    incidents = sorted(p for p in seed_demo.INCIDENTS.iterdir() if p.is_dir())
    assert incidents, "the demo ships at least one incident"
    doc_files = document_files([p / "docs" for p in incidents if (p / "docs").is_dir()])
    expected_tables = merge(
        [t for p in incidents if (p / "tables.yaml").is_file() for t in read_tables(p / "tables.yaml")]
    )

    first = seed()
    assert f"demo data: {len(incidents)} incidents" in first
    assert f"runbooks: {len(SHIPPED_RUNBOOKS)} created, 0 updated, 0 unchanged, 0 rejected" in first
    after_first = counts()
    assert Runbook.objects.count() == len(SHIPPED_RUNBOOKS) > 0
    assert after_first["logs"] > 0
    logs = log_files(p / "logs" for p in incidents if (p / "logs").is_dir())
    assert f"log lines from {len(logs)} files" in first
    assert 0 < len(after_first["log_sources"]) <= len(logs)
    # every document file became a document; the ones that indexed have chunks, all with vectors
    assert len(after_first["documents"]) == len({hashlib.sha256(p.read_bytes()).hexdigest() for p in doc_files})
    indexed = Document.objects.filter(status=DocumentStatus.INDEXED)
    assert indexed.count() + first.count("document not indexed:") == Document.objects.count()
    assert Chunk.objects.filter(document__in=indexed).count() == after_first["chunks"]
    assert not Chunk.objects.exclude(embedding_model=embedder.name).exists()
    tables = business_tables(business_db)
    assert expected_tables and set(tables) == {t.name for t in expected_tables}
    assert tables == {t.name: len(t.rows) for t in expected_tables}
    assert f"{len(expected_tables)} business tables" in first

    embedded = embedder.texts
    second = seed()
    assert counts() == after_first
    assert business_tables(business_db) == tables
    assert f"runbooks: 0 created, 0 updated, {len(SHIPPED_RUNBOOKS)} unchanged, 0 rejected" in second
    # nothing already indexed is embedded again
    assert embedder.texts == embedded


# --- a demo folder of our own: exact numbers -------------------------------------------------


@pytest.fixture
def incidents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two incidents built from the scenario fixtures; both contribute a config_changes table."""
    root = tmp_path / "incidents"
    first = root / "inventory-pool"
    shutil.copytree(SCENARIO / "docs", first / "docs")
    shutil.copytree(SCENARIO / "logs", first / "logs")
    (first / "logs" / "README.md").write_text("not a log file\n", encoding="utf-8")
    shutil.copy(SCENARIO / "tables.yaml", first / "tables.yaml")
    second = root / "checkout-banner"
    (second / "docs").mkdir(parents=True)
    # the same FAQ again (recognised by its content) and a document with no text
    shutil.copy(SCENARIO / "docs" / "checkout-faq.txt", second / "docs" / "faq-copy.txt")
    (second / "docs" / "empty.md").write_text("\n\n", encoding="utf-8")
    (second / "tables.yaml").write_text(
        "config_changes:\n"
        "  columns: {id: integer, service: text, config_key: text, old_value: text, new_value: text, changed_at: datetime}\n"
        "  rows:\n"
        '    - [3, checkout-service, checkout.banner.enabled, "true", "false", "2026-05-10 10:30:00"]\n',
        encoding="utf-8",
    )
    (root / "NOTES.txt").write_text("files beside the incident folders are ignored\n", encoding="utf-8")
    monkeypatch.setattr(seed_demo, "INCIDENTS", root)
    return root


def test_seed_demo_loads_every_kind_of_evidence_from_each_incident(
    incidents: Path, business_db: Path, embedder: HashEmbedder
) -> None:
    out = seed()
    assert "demo data: 2 incidents" in out
    assert "21 log lines from 1 files; 2 business tables" in out
    # incidents load in name order: checkout-banner's copy of the FAQ is the one kept
    assert sorted(Document.objects.values_list("filename", "status")) == [
        ("empty.md", "failed"),
        ("faq-copy.txt", "indexed"),
        ("inventory-service.md", "indexed"),
    ]
    assert "document not indexed: empty.md: " in out
    assert Chunk.objects.count() >= 3 and not Chunk.objects.filter(embedding__isnull=True).exists()
    assert LogEntry.objects.count() == 21
    assert LogEntry.objects.filter(level=3, message__startswith="Redis connection pool exhausted").count() == 6
    assert Runbook.objects.count() == len(SHIPPED_RUNBOOKS)
    # config_changes of both incidents, merged in incident order (checkout-banner's row first)
    assert business_tables(business_db) == {"config_changes": 3, "stock_levels": 2}
    with sqlite3.connect(business_db) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM config_changes")]
    conn.close()
    assert ids == [3, 1, 2]

    before = counts()
    again = seed()
    assert counts() == before
    assert business_tables(business_db) == {"config_changes": 3, "stock_levels": 2}
    assert "document not indexed: empty.md: " in again  # still reported, still one row


def test_a_log_file_changed_since_is_replaced_not_added(
    incidents: Path, business_db: Path, embedder: HashEmbedder
) -> None:
    seed()
    log = incidents / "inventory-pool" / "logs" / "inventory.jsonl"
    log.write_text("".join(log.read_text(encoding="utf-8").splitlines(keepends=True)[:5]), encoding="utf-8")
    seed()
    assert LogEntry.objects.count() == 5


def test_without_a_business_database_the_rest_is_still_loaded(
    incidents: Path, settings: Any, embedder: HashEmbedder, tmp_path: Path
) -> None:
    settings.EVIDENCE_SQL_URL = "none"
    out = seed()
    assert LogEntry.objects.count() == 21 and Document.objects.count() == 3
    assert "2 business tables" in out
    assert not list(tmp_path.glob("**/*.sqlite3"))


def test_tables_that_do_not_fit_together_stop_the_command_with_a_clear_error(
    incidents: Path, business_db: Path, embedder: HashEmbedder
) -> None:
    (incidents / "checkout-banner" / "tables.yaml").write_text(
        "config_changes:\n  columns: {id: integer, note: text}\n  rows: [[1, x]]\n", encoding="utf-8"
    )
    with pytest.raises(CommandError, match="table config_changes is defined twice with different columns"):
        seed()
    assert not business_db.exists()


def test_a_bad_tables_file_names_itself(incidents: Path, business_db: Path, embedder: HashEmbedder) -> None:
    bad = incidents / "checkout-banner" / "tables.yaml"
    bad.write_text("config_changes:\n  columns: {id: uuid}\n", encoding="utf-8")
    with pytest.raises(CommandError, match=f"{bad}: table config_changes: column id has type 'uuid'"):
        seed()


def test_no_incidents_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, business_db: Path) -> None:
    monkeypatch.setattr(seed_demo, "INCIDENTS", tmp_path / "nothing-here")
    with pytest.raises(CommandError, match="no demo incidents under"):
        seed()
    (tmp_path / "nothing-here").mkdir()
    with pytest.raises(CommandError, match="no demo incidents under"):
        seed()
    assert not Runbook.objects.exists()
