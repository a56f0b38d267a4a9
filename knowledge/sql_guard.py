"""The static guard in front of the business datasource: one read-only SELECT, or a refusal.

``check_statement`` parses the agent's SQL with sqlglot and refuses anything that is not
exactly one ``SELECT`` (optionally with ``WITH`` or ``UNION``) free of writes, DDL, locking
reads, ``INTO``, variables, hints, dangerous or unknown functions, system schemas and tables
outside the allow-list. What it returns is not the caller's text but the statement
regenerated from the checked tree without comments, and re-checked: the database runs what
was inspected, so comment and tokenizer tricks (``/*! ... */``, ``--1``) have nothing to hide in.

The guard is one layer: the datasource also opens a read-only connection, so a statement
that slipped through still cannot write. Plain Python, no Django.
"""

from __future__ import annotations

import logging
import unicodedata

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel
from sqlglot.tokenizer_core import Token, TokenType

from harness.ports import SqlRefused

__all__ = [
    "DENIED_FUNCTIONS",
    "DIALECTS",
    "KNOWN_ANONYMOUS_FUNCTIONS",
    "SYSTEM_SCHEMAS",
    "check_statement",
    "fold_name",
]


class _WithoutStatementText(logging.Filter):
    """Drops sqlglot's "falling back to a Command" warning: it quotes the agent's SQL."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a" not in str(record.msg)


logging.getLogger("sqlglot").addFilter(_WithoutStatementText())


def _words(text: str) -> list[str]:
    return text.split()


DIALECTS = frozenset({"mysql", "sqlite"})
SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})
_SYSTEM_TABLE_PREFIXES = ("sqlite_", "pragma_")

_UNPARSABLE = "the statement could not be parsed"
_ONE_STATEMENT = "only one statement is allowed"
_ONLY_SELECT = "only SELECT statements are allowed"

# Words that never appear, unquoted, in a read: found at the token level, whatever the parser
# makes of the rest. (REPLACE, SET and HANDLER are left to the parser: they are also a
# function, a CAST clause and a plausible column name.)
_FORBIDDEN_WORDS = {
    "INSERT": "INSERT is not allowed",
    "UPDATE": "UPDATE is not allowed",
    "DELETE": "DELETE is not allowed",
    "MERGE": "MERGE is not allowed",
    "CREATE": "CREATE is not allowed",
    "DROP": "DROP is not allowed",
    "ALTER": "ALTER is not allowed",
    "TRUNCATE": "TRUNCATE is not allowed",
    "RENAME": "RENAME is not allowed",
    "GRANT": "GRANT is not allowed",
    "REVOKE": "REVOKE is not allowed",
    "CALL": "CALL is not allowed",
    "LOCK": "locking reads are not allowed",
    "UNLOCK": "UNLOCK is not allowed",
    "INTO": "SELECT ... INTO is not allowed",
    "OUTFILE": "writing files is not allowed",
    "DUMPFILE": "writing files is not allowed",
    "ATTACH": "ATTACH is not allowed",
    "DETACH": "DETACH is not allowed",
    "VACUUM": "VACUUM is not allowed",
}

# A statement that does not parse is refused; when it starts with one of these words the
# reason says which kind it was.
_STATEMENT_WORDS = frozenset(
    _words(
        """ALTER ANALYZE ATTACH BACKUP BEGIN BINLOG CACHE CALL CHANGE CHECK CHECKSUM COMMIT COPY CREATE
    DEALLOCATE DECLARE DELETE DESC DESCRIBE DETACH DO DROP EXECUTE EXPLAIN FLUSH GET GRANT HANDLER HELP
    INSERT INSTALL KILL LOAD LOCK MERGE OPTIMIZE PRAGMA PREPARE PURGE REINDEX RELEASE RENAME REPAIR
    REPLACE RESET RESIGNAL RESTORE REVOKE ROLLBACK SAVEPOINT SET SHOW SHUTDOWN SIGNAL START STOP
    TRUNCATE UNINSTALL UNLOCK UPDATE USE VACUUM XA"""
    )
)

# Statement and clause nodes that never belong in a read, wherever they sit in the tree.
_FORBIDDEN_NODES: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.Insert, "INSERT is not allowed"),
    (exp.Update, "UPDATE is not allowed"),
    (exp.Delete, "DELETE is not allowed"),
    (exp.Merge, "MERGE is not allowed"),
    (exp.Copy, "COPY is not allowed"),
    (exp.Create, "CREATE is not allowed"),
    (exp.Drop, "DROP is not allowed"),
    (exp.Alter, "ALTER is not allowed"),
    (exp.TruncateTable, "TRUNCATE is not allowed"),
    (exp.Grant, "GRANT is not allowed"),
    (exp.Revoke, "REVOKE is not allowed"),
    (exp.DML, "data-changing statements are not allowed"),
    (exp.DDL, "schema-changing statements are not allowed"),
    (exp.Set, "SET is not allowed"),
    (exp.SetItem, "SET is not allowed"),
    (exp.Command, _ONLY_SELECT),
    (exp.Transaction, "transaction statements are not allowed"),
    (exp.Commit, "transaction statements are not allowed"),
    (exp.Rollback, "transaction statements are not allowed"),
    (exp.Use, "USE is not allowed"),
    (exp.Pragma, "PRAGMA is not allowed"),
    (exp.Attach, "ATTACH is not allowed"),
    (exp.Detach, "DETACH is not allowed"),
    (exp.LoadData, "LOAD DATA is not allowed"),
    (exp.Kill, "KILL is not allowed"),
    (exp.Analyze, "ANALYZE is not allowed"),
    (exp.Cache, "CACHE is not allowed"),
    (exp.Uncache, "UNCACHE is not allowed"),
    (exp.Refresh, "REFRESH is not allowed"),
    (exp.Declare, "DECLARE is not allowed"),
    (exp.Execute, "EXECUTE is not allowed"),
    (exp.Export, "EXPORT is not allowed"),
    (exp.Summarize, "SUMMARIZE is not allowed"),
    (exp.Describe, "SHOW, DESCRIBE and EXPLAIN are not allowed"),
    (exp.Show, "SHOW, DESCRIBE and EXPLAIN are not allowed"),
    (exp.Into, "SELECT ... INTO is not allowed"),
    (exp.Lock, "locking reads (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE) are not allowed"),
    (exp.Hint, "optimizer hints are not allowed"),
    (exp.Parameter, "variables and parameters are not allowed"),
    (exp.SessionParameter, "variables and parameters are not allowed"),
    (exp.Placeholder, "variables and parameters are not allowed"),
    (exp.NextValueFor, "sequences are not allowed"),
    (exp.TableFromRows, "table-valued functions are not allowed"),
    (exp.Dot, "qualified names are not allowed"),
)

_FILES = "functions that touch files are not allowed"
_TIME = "functions that sleep or lock are not allowed"
_EXEC = "functions that run commands or extensions are not allowed"
_INFO = "functions that describe the server or session are not allowed"
_STATE = "functions that change state are not allowed"

# Functions refused by name, whether sqlglot knows them or parses them as anonymous.
DENIED_FUNCTIONS: dict[str, str] = {
    **dict.fromkeys(
        (
            "load_file",
            "readfile",
            "writefile",
            "edit",
            "lo_import",
            "lo_export",
            "pg_read_file",
            "pg_read_binary_file",
            "pg_ls_dir",
            "pg_stat_file",
            "read_csv",
            "readcsv",
            "read_parquet",
            "readparquet",
            "tofile",
            "to_file",
        ),
        _FILES,
    ),
    **dict.fromkeys(
        (
            "sleep",
            "benchmark",
            "get_lock",
            "release_lock",
            "release_all_locks",
            "is_free_lock",
            "is_used_lock",
            "master_pos_wait",
            "source_pos_wait",
            "master_gtid_wait",
            "wait_for_executed_gtid_set",
            "wait_until_sql_thread_after_gtids",
            "pg_sleep",
            "pg_sleep_for",
            "pg_sleep_until",
            "pg_advisory_lock",
            "pg_advisory_xact_lock",
            "pg_try_advisory_lock",
        ),
        _TIME,
    ),
    **dict.fromkeys(
        (
            "sys_exec",
            "sys_eval",
            "sys_get",
            "sys_set",
            "sys_bineval",
            "lib_mysqludf_sys_info",
            "load_extension",
            "fts3_tokenizer",
            "xp_cmdshell",
            "dblink",
            "dblink_exec",
            "pg_terminate_backend",
            "pg_cancel_backend",
        ),
        _EXEC,
    ),
    **dict.fromkeys(
        (
            "user",
            "current_user",
            "session_user",
            "system_user",
            "current_role",
            "version",
            "current_version",
            "currentversion",
            "currentuser",
            "sessionuser",
            "connection_id",
            "sqlite_version",
            "sqlite_source_id",
            "sqlite_compileoption_get",
            "sqlite_compileoption_used",
            "sqlite_offset",
            "current_setting",
            "changes",
            "total_changes",
            "last_insert_rowid",
            "last_insert_id",
            "found_rows",
            "row_count",
        ),
        _INFO,
    ),
    **dict.fromkeys(
        ("nextval", "setval", "lastval", "set_config", "uuid_short", "random_bytes", "randomblob", "zeroblob"),
        _STATE,
    ),
}
_DENIED_PREFIXES = (
    ("sys_", _EXEC),
    ("lib_mysqludf", _EXEC),
    ("xp_", _EXEC),
    ("pg_", _EXEC),
    ("lo_", _FILES),
    ("sqlite_", _INFO),
    ("pragma_", "SQLite system tables are not allowed"),
)

# Built-in functions that sqlglot may parse as anonymous, by name. A function it does not know
# and that is not listed here may be a user-defined function (a UDF like sys_exec, or a stored
# function), so it is refused.
KNOWN_ANONYMOUS_FUNCTIONS = frozenset(
    _words(
        """
    abs acos acosh adddate addtime any_value ascii asin asinh atan atan2 atanh avg bin bit_and bit_count
    bit_length bit_or bit_xor ceil ceiling char char_length character_length charset chr coalesce
    coercibility collation concat concat_ws conv convert_tz cos cosh cot count crc32 cume_dist curdate
    current_date current_time current_timestamp curtime date date_add date_format date_sub date_trunc
    datediff datetime day dayname dayofmonth dayofweek dayofyear degrees dense_rank elt exp export_set
    extract field find_in_set first_value floor format format_bytes format_pico_time from_base64
    from_days from_unixtime get_format glob greatest group_concat hex hour if ifnull iif inet6_aton
    inet6_ntoa inet_aton inet_ntoa instr is_ipv4 is_ipv6 is_uuid isnull json json_array json_array_length
    json_arrayagg json_contains json_contains_path json_depth json_extract json_group_array
    json_group_object json_keys json_length json_object json_objectagg json_overlaps json_patch
    json_pretty json_quote json_search json_type json_unquote json_valid json_value julianday lag
    last_day last_value lcase lead least left length like likelihood likely ln localtime localtimestamp
    locate log log10 log2 lower lpad ltrim make_set makedate maketime max md5 median microsecond mid min
    minute mod month monthname natural_sort_key now nth_value ntile nullif nvl nvl2 oct octet_length ord
    percent_rank percentile_cont percentile_disc period_add period_diff pi position pow power printf
    quarter quote radians rand random rank regexp regexp_instr regexp_like regexp_replace regexp_substr
    repeat replace reverse right round row_number rpad rtrim sec_to_time second sha sha1 sha2 sign sin
    sinh soundex space sqrt std stddev stddev_pop stddev_samp str_to_date strcmp strftime string_agg
    subdate substr substring substring_index subtime sum sysdate tan tanh time time_format time_to_sec
    timediff timestamp timestampadd timestampdiff to_base64 to_char to_days to_seconds total trim trunc
    truncate typeof ucase unhex unicode unix_timestamp unixepoch unlikely upper utc_date utc_time
    utc_timestamp uuid var_pop var_samp variance week weekday weekofyear year yearweek
    """
    )
)


def check_statement(
    sql: str, *, dialect: str, allowed_tables: frozenset[str] | None = None, max_chars: int = 4000
) -> str:
    """The single read-only statement to run, regenerated from its checked parse tree.

    Raises :class:`SqlRefused` with a short reason, safe to show, for anything else.
    ``allowed_tables`` (matched ignoring the case of ASCII letters) limits the tables the
    statement may read; ``None`` allows any table outside the system schemas. Qualified names
    are always refused.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}")
    if not isinstance(sql, str):
        raise SqlRefused("the statement must be text")
    if len(sql) > max_chars:
        raise SqlRefused(f"the statement is longer than {max_chars} characters")
    allowed = None if allowed_tables is None else frozenset(fold_name(t) for t in allowed_tables)
    tree = _inspect(sql, dialect, allowed)
    normalised = _render(tree, dialect)
    # What runs is the regenerated text: it must pass the same checks and be a fixed point, so
    # nothing the generator changed escapes inspection.
    if _render(_inspect(normalised, dialect, allowed), dialect) != normalised:
        raise SqlRefused("the statement could not be normalised")
    return normalised


# --- the steps -----------------------------------------------------------------------------


def _inspect(sql: str, dialect: str, allowed: frozenset[str] | None) -> exp.Expr:
    _check_characters(sql)
    tokens = _tokenize(sql, dialect)
    _check_semicolons(tokens)
    tree = _parse_one(sql, dialect, tokens)
    _check_root(tree, tokens)
    _check_tree(tree, allowed)
    # A second, parser-independent net: words no read contains, unquoted, anywhere.
    reason = _forbidden_word(tokens)
    if reason is not None:
        raise SqlRefused(reason)
    return tree


def _render(tree: exp.Expr, dialect: str) -> str:
    try:
        return tree.sql(dialect=dialect, comments=False, unsupported_level=ErrorLevel.RAISE)
    except Exception:  # noqa: BLE001 - any generator failure is a refusal, never a crash
        raise SqlRefused("the statement could not be normalised") from None


def _check_characters(sql: str) -> None:
    if not sql.strip():
        raise SqlRefused("the statement is empty")
    for char in sql:
        category = unicodedata.category(char)
        if (category == "Cc" and char not in "\t\n\r") or category in ("Cf", "Cs", "Co", "Cn"):
            raise SqlRefused("the statement contains control or invisible characters")
    lowered = sql.lower()
    if "/*!" in lowered or "/*m!" in lowered:
        raise SqlRefused("executable comments are not allowed")


def _tokenize(sql: str, dialect: str) -> list[Token]:
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:  # noqa: BLE001 - the tokenizer's errors are all "could not be parsed"
        raise SqlRefused(_UNPARSABLE) from None
    if not tokens or all(t.token_type == TokenType.SEMICOLON for t in tokens):
        raise SqlRefused("the statement is empty")
    return tokens


def _is_text_token(token: Token) -> bool:
    """Literals and quoted identifiers: their text is data, not SQL."""
    return token.token_type == TokenType.IDENTIFIER or token.token_type.name.endswith("STRING")


def _check_semicolons(tokens: list[Token]) -> None:
    semicolons = [i for i, t in enumerate(tokens) if t.token_type == TokenType.SEMICOLON]
    if semicolons and semicolons != [len(tokens) - 1]:
        raise SqlRefused(_ONE_STATEMENT)


def _forbidden_word(tokens: list[Token]) -> str | None:
    for token in tokens:
        if _is_text_token(token):
            continue
        word = token.text.upper()
        if word in _FORBIDDEN_WORDS:
            return _FORBIDDEN_WORDS[word]
        if word.startswith(("@", "$")):
            return "variables and parameters are not allowed"
    return None


def _parse_one(sql: str, dialect: str, tokens: list[Token]) -> exp.Expr:
    try:
        statements = sqlglot.parse(sql, dialect=dialect, error_level=ErrorLevel.RAISE)
    except Exception:  # noqa: BLE001 - ParseError, TokenError, RecursionError...: all refused
        raise SqlRefused(_unparsable_reason(tokens)) from None
    if len(statements) != 1 or statements[0] is None:
        raise SqlRefused(_ONE_STATEMENT if len(statements) > 1 else "the statement is empty")
    return statements[0]


def _unparsable_reason(tokens: list[Token]) -> str:
    return _statement_word_reason(tokens) or _forbidden_word(tokens) or _UNPARSABLE


def _statement_word_reason(tokens: list[Token]) -> str | None:
    first = next((t for t in tokens if t.token_type != TokenType.L_PAREN), None)
    word = first.text.upper() if first is not None and not _is_text_token(first) else ""
    return f"{word} statements are not allowed; only SELECT is" if word in _STATEMENT_WORDS else None


def _check_root(tree: exp.Expr, tokens: list[Token]) -> None:
    if isinstance(tree, exp.Select | exp.Union):
        return
    if isinstance(tree, exp.Command):
        raise SqlRefused(_statement_word_reason(tokens) or _ONLY_SELECT)
    for node_type, reason in _FORBIDDEN_NODES:
        if isinstance(tree, node_type):
            raise SqlRefused(reason)
    raise SqlRefused(_ONLY_SELECT)


def _check_tree(tree: exp.Expr, allowed: frozenset[str] | None) -> None:
    for node in tree.walk():
        for node_type, reason in _FORBIDDEN_NODES:
            if isinstance(node, node_type):
                raise SqlRefused(reason)
        if isinstance(node, exp.Identifier) and not node.quoted and str(node.this).startswith(("@", "$")):
            raise SqlRefused("variables and parameters are not allowed")
        if isinstance(node, exp.Func):
            _check_function(node)
        elif isinstance(node, exp.Table):
            _check_table(node, allowed)
        elif isinstance(node, exp.Column):
            _check_column(node)
        elif isinstance(node, exp.With):
            names = [fold_name(cte.alias_or_name) for cte in node.expressions]
            if len(set(names)) != len(names):
                raise SqlRefused("common table expression names must be unique")


# --- functions, tables, columns ------------------------------------------------------------


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold_name(name: str) -> str:
    """A table name as matched against the allow-list: ASCII letters in lower case, nothing else.

    Unicode case folding (``ß`` -> ``ss``, fullwidth -> ASCII) is left out on purpose: a name
    only the guard folded could name a different table in the database.
    """
    return name.translate(_ASCII_LOWER)


def _fold(name: str) -> str:
    """Aggressive folding, to recognise system names however they are spelt."""
    return unicodedata.normalize("NFKC", name).casefold()


def _function_names(node: exp.Func) -> list[str]:
    if isinstance(node, exp.Anonymous):
        return [str(node.this)]
    try:
        sql_names = list(type(node).sql_names())
    except Exception:  # noqa: BLE001 - a class without SQL names is judged by its class name
        sql_names = []
    return [type(node).__name__, node.key, *sql_names]


def _check_function(node: exp.Func) -> None:
    names = [_fold(n) for n in _function_names(node)]
    for name in names:
        if "." in name:
            raise SqlRefused("qualified names are not allowed")
        if name in DENIED_FUNCTIONS:
            raise SqlRefused(DENIED_FUNCTIONS[name])
        for prefix, reason in _DENIED_PREFIXES:
            if name.startswith(prefix):
                raise SqlRefused(reason)
    if isinstance(node, exp.Anonymous) and names[0] not in KNOWN_ANONYMOUS_FUNCTIONS:
        raise SqlRefused(f"function {_shown(names[0])} is not allowed")


def _check_table(table: exp.Table, allowed: frozenset[str] | None) -> None:
    if not isinstance(table.this, exp.Identifier):
        raise SqlRefused("table-valued functions are not allowed")
    name = _fold(table.name)
    qualifiers = [_fold(q) for q in (table.text("db"), table.text("catalog")) if q]
    if any(q in SYSTEM_SCHEMAS for q in qualifiers) or name in SYSTEM_SCHEMAS:
        raise SqlRefused("system schemas are not allowed")
    if name.startswith(_SYSTEM_TABLE_PREFIXES) or any(q.startswith(_SYSTEM_TABLE_PREFIXES) for q in qualifiers):
        raise SqlRefused("SQLite system tables are not allowed")
    if qualifiers:
        raise SqlRefused("qualified table names are not allowed")
    if _names_a_cte(table):
        return
    if allowed is not None and fold_name(table.name) not in allowed:
        raise SqlRefused(f"table {_shown(table.name)} is not available")


def _check_column(column: exp.Column) -> None:
    if column.text("db") or column.text("catalog"):
        raise SqlRefused("qualified names are not allowed")
    qualifier = _fold(column.table)
    if qualifier in SYSTEM_SCHEMAS or qualifier.startswith(_SYSTEM_TABLE_PREFIXES):
        raise SqlRefused("system schemas are not allowed")


def _with_of(node: exp.Expr) -> exp.With | None:
    found = node.args.get("with_", node.args.get("with"))
    return found if isinstance(found, exp.With) else None


def _names_a_cte(table: exp.Table) -> bool:
    """Whether this table reference resolves to a common table expression in scope.

    A reference inside CTE *i* may use CTEs before *i* (and *i* itself when ``RECURSIVE``);
    one that names *i* or a later CTE is refused: MySQL and SQLite resolve it differently.
    Names must match exactly: one that differs only in letter case is refused, as servers
    differ on whether it is the CTE or a table.
    """
    name = table.name
    path: list[exp.Expr] = [table]
    node = table.parent
    while node is not None:
        with_ = _with_of(node)
        if with_ is not None:
            names = [cte.alias_or_name for cte in with_.expressions]
            if len(path) >= 2 and path[-1] is with_:
                cte = path[-2]
                index = next((i for i, c in enumerate(with_.expressions) if c is cte), None)
                if index is None:  # pragma: no cover - a With's children are its CTEs
                    raise SqlRefused(_UNPARSABLE)
                if _is_one_of(name, names[:index]):
                    return True
                if with_.args.get("recursive") and _is_one_of(name, names[index : index + 1]):
                    return True
                if fold_name(name) in {fold_name(n) for n in names[index:]}:
                    raise SqlRefused("a common table expression may only use the ones defined before it")
            elif _is_one_of(name, names):
                return True
        path.append(node)
        node = node.parent
    return False


def _is_one_of(name: str, cte_names: list[str]) -> bool:
    if name in cte_names:
        return True
    if fold_name(name) in {fold_name(n) for n in cte_names}:
        raise SqlRefused("a table name must match its common table expression's name exactly")
    return False


def _shown(name: str) -> str:
    """A name from the statement, made safe to echo in a reason."""
    printable = "".join(c for c in name if c.isprintable())[:64]
    return repr(printable)
