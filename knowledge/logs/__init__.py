"""Application logs, in three parts, each usable on its own.

- :mod:`~knowledge.logs.parsing`: log files read into entries (JSON lines, ISO-timestamped
  text, syslog, logfmt, Monolog; ``.gz``), and the reason for every line that is not one.
- :mod:`~knowledge.logs.ingest`: entries stored as :class:`~knowledge.models.LogEntry` rows
  (``manage.py ingest_logs``), each line once (:mod:`~knowledge.logs.identity`: a line's digest).
- :mod:`~knowledge.logs.source`: :class:`~knowledge.logs.source.DatabaseLogSource`, the
  :class:`~harness.ports.LogSource` the agent's ``query_logs`` tool reads, with the semantics of
  :class:`harness.inmemory.InMemoryLogs` and message templates mined with drain3.

Levels, templates and which templates a result keeps are :mod:`harness.logs`, shared with the
in-memory source and the offline analyst.
"""
