"""The evidence tools of the diagnosis agent, each a ``ToolSpec`` over its port.

The composition root builds the list the harness gets (``ChatApplication(tools=[...])``), one
spec per configured backend, so the agent is never offered a dead tool. Another tool is another
spec like these (its arguments model, a handler over its port, its ``CitationFields``), in a
module of its own, plus one line in the wiring.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from harness.logs import LEVEL_ALIASES, Level
from harness.ports import KnowledgeSearch, LogQuery, LogSource, SqlRefused, SqlSource
from harness.tools.spec import CitationFields, ToolArguments, ToolOutput, ToolRefused, ToolSpec

LOOKUP_KNOWLEDGE = "lookup_knowledge"
QUERY_LOGS = "query_logs"
QUERY_MYSQL = "query_mysql"


class LookupKnowledgeArgs(ToolArguments):
    query: Annotated[str, Field(min_length=1, max_length=500, description="What to look up.")]
    top_k: Annotated[int, Field(ge=1, le=8, description="How many chunks to return.")] = 5


class QueryLogsArgs(ToolArguments):
    query: Annotated[
        str,
        Field(max_length=200, description="Words the message must contain; empty matches every line."),
    ] = ""
    service: Annotated[str | None, Field(max_length=100, description="Only this service.")] = None
    level: Annotated[
        Level | None,
        Field(description="Minimum severity, e.g. WARN returns WARN, ERROR and FATAL."),
    ] = None
    start: Annotated[datetime | None, Field(description="ISO-8601 start of the time range.")] = None
    end: Annotated[datetime | None, Field(description="ISO-8601 end of the time range.")] = None
    limit: Annotated[int, Field(ge=1, le=100, description="Maximum lines to return.")] = 50

    @field_validator("level", mode="before")
    @classmethod
    def _normalise_level(cls, value: Any) -> Any:
        if isinstance(value, str):
            upper = value.strip().upper()
            return LEVEL_ALIASES.get(upper, upper)
        return value

    @field_validator("start", "end", mode="after")
    @classmethod
    def _assume_utc(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @model_validator(mode="after")
    def _ordered_range(self) -> QueryLogsArgs:
        if self.start and self.end and self.start > self.end:
            raise ValueError("start must not be after end")
        return self


class QueryMysqlArgs(ToolArguments):
    sql: Annotated[str, Field(min_length=1, max_length=4000, description="One read-only SELECT statement.")]


def lookup_knowledge_tool(search: KnowledgeSearch, *, timeout_s: float | None = None) -> ToolSpec[LookupKnowledgeArgs]:
    def handle(args: LookupKnowledgeArgs, _timeout_s: float) -> ToolOutput:
        result = search.search(args.query, args.top_k)
        raw = {
            "evidence_status": result.evidence_status,
            "retrieval_mode": result.retrieval_mode,
            "chunks": [
                {
                    "document_id": c.document_id,
                    "title": c.title,
                    "section": c.section,
                    "text": c.text,
                    "score": round(float(c.score), 4),
                    "approved": c.approved,
                }
                for c in result.chunks
            ],
        }
        status = result.evidence_status if result.chunks else "no_evidence"
        return ToolOutput(raw, status)

    return ToolSpec(
        name=LOOKUP_KNOWLEDGE,
        description=(
            "Search the team's knowledge base (runbooks, architecture notes, past incidents). "
            "Returns the best matching chunks with their document id, title and section, "
            "approved false for a document nobody has reviewed yet (the asker's own upload), and "
            "evidence_status 'no_evidence' when nothing relevant was found."
        ),
        args_model=LookupKnowledgeArgs,
        handler=handle,
        timeout_s=timeout_s,
        # a cited chunk names its document and its provenance, and the document is one of the
        # report's sources
        citations=CitationFields(
            source=("document_id", "title", "section", "approved"),
            shown=("document_id", "title", "section", "approved"),
            reference=("document_id", "title", "section", "approved"),
        ),
    )


def query_logs_tool(logs: LogSource, *, timeout_s: float | None = None) -> ToolSpec[QueryLogsArgs]:
    def handle(args: QueryLogsArgs, _timeout_s: float) -> ToolOutput:
        result = logs.query(
            LogQuery(
                query=args.query,
                service=args.service or None,
                level=args.level,
                start=args.start,
                end=args.end,
                limit=args.limit,
            )
        )
        raw = {
            "total": result.total,
            "returned": len(result.lines),
            "counts_by_level": dict(result.counts_by_level),
            "counts_by_service": dict(result.counts_by_service),
            "templates": [
                {
                    "template": t.template,
                    "count": t.count,
                    "level": t.level,
                    "services": list(t.services),
                    "first_ts": t.first_ts,
                    "last_ts": t.last_ts,
                    "example": t.example,
                    **({"hosts": list(t.hosts)} if t.hosts else {}),
                }
                for t in result.templates
            ],
            "lines": [
                {"ts": line.ts, "service": line.service, "level": line.level, "message": line.message}
                for line in result.lines
            ],
        }
        return ToolOutput(raw, "ok" if result.lines else "no_evidence")

    return ToolSpec(
        name=QUERY_LOGS,
        description=(
            "Search application logs by text, service, minimum level and ISO-8601 time range. "
            "Returns matching lines (newest first, bounded), counts by level and service, and "
            "the most frequent message templates (variable parts shown as <*>)."
        ),
        args_model=QueryLogsArgs,
        handler=handle,
        timeout_s=timeout_s,
        # a line has its service, time and level; a template, its services and level
        citations=CitationFields(source=("service", "services", "ts", "level"), shown=("service", "ts")),
    )


def query_mysql_tool(sql: SqlSource, *, timeout_s: float | None = None) -> ToolSpec[QueryMysqlArgs]:
    tables = list(sql.tables())

    def handle(args: QueryMysqlArgs, timeout: float) -> ToolOutput:
        try:
            result = sql.execute(args.sql, timeout_s=timeout)
        except SqlRefused as exc:
            raise ToolRefused("sql_refused", exc.reason) from None
        raw = {
            "columns": list(result.columns),
            "rows": [list(row) for row in result.rows],
            "row_count": len(result.rows),
            "truncated": result.truncated,
        }
        return ToolOutput(raw, "ok" if result.rows else "no_evidence")

    listing = "; ".join(
        f"{t.name}({', '.join(t.columns)})" + (f" - {t.description}" if t.description else "") for t in tables[:30]
    )
    return ToolSpec(
        name=QUERY_MYSQL,
        description=(
            "Run ONE read-only SELECT against the business database (rows are capped). "
            "Writes, DDL, several statements and system schemas are refused. "
            f"Tables: {listing or 'none listed'}."
        ),
        args_model=QueryMysqlArgs,
        handler=handle,
        timeout_s=timeout_s,
        citations=CitationFields(source=("columns",)),
    )
