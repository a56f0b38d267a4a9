"""The static guard in front of the business datasource: one read-only SELECT, or a refusal.

``check_statement`` parses the agent's SQL with sqlglot and refuses anything that is not
exactly one ``SELECT`` (optionally with ``WITH`` or ``UNION``) free of writes, DDL, locking
reads, ``INTO``, variables, hints, dangerous or unknown functions, system schemas and tables
outside the allow-list, that selects a bounded number of columns and cannot build values far
larger than the data it reads (the database would compute them where no timeout or ``KILL``
reaches). What it returns is not the caller's text but the statement
regenerated from the checked tree without comments, and re-checked: the database runs what
was inspected, so comment and tokenizer tricks (``/*! ... */``, ``--1``) have nothing to hide in.

The guard is one layer: the datasource also opens a read-only connection, so a statement
that slipped through still cannot write. Plain Python, no Django.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ErrorLevel
from sqlglot.tokenizer_core import Token, TokenType

from harness.ports import SqlRefused

__all__ = [
    "COSTLY_FUNCTION",
    "DENIED_FUNCTIONS",
    "DIALECTS",
    "GROWING_RECURSION",
    "KNOWN_ANONYMOUS_FUNCTIONS",
    "RECURSION_STEPS",
    "REGEXP_ON_COLUMNS",
    "SYSTEM_SCHEMAS",
    "VALUES_TOO_LARGE",
    "VALUE_UNIT_BYTES",
    "check_statement",
    "fold_name",
    "too_many_columns",
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
        ("nextval", "setval", "lastval", "set_config", "uuid_short", "random_bytes"),
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
    sql: str,
    *,
    dialect: str,
    allowed_tables: frozenset[str] | None = None,
    max_chars: int = 4000,
    max_columns: int = 64,
) -> str:
    """The single read-only statement to run, regenerated from its checked parse tree.

    Raises :class:`SqlRefused` with a short reason, safe to show, for anything else.
    ``allowed_tables`` (matched ignoring the case of ASCII letters) limits the tables the
    statement may read; ``None`` allows any table outside the system schemas. Qualified names
    are always refused. At most ``max_columns`` expressions may be selected (a ``*`` counts as
    one here; the datasource counts the columns it really returns), and no expression may
    build a value far larger than what it reads (see "what a statement can cost" below).
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}")
    if not isinstance(sql, str):
        raise SqlRefused("the statement must be text")
    if len(sql) > max_chars:
        raise SqlRefused(f"the statement is longer than {max_chars} characters")
    allowed = None if allowed_tables is None else frozenset(fold_name(t) for t in allowed_tables)
    tree = _inspect(sql, dialect, allowed, max_columns)
    normalised = _render(tree, dialect)
    # What runs is the regenerated text: it must pass the same checks and be a fixed point, so
    # nothing the generator changed escapes inspection.
    if _render(_inspect(normalised, dialect, allowed, max_columns), dialect) != normalised:
        raise SqlRefused("the statement could not be normalised")
    return normalised


# --- the steps -----------------------------------------------------------------------------


def _inspect(sql: str, dialect: str, allowed: frozenset[str] | None, max_columns: int) -> exp.Expr:
    _check_characters(sql)
    tokens = _tokenize(sql, dialect)
    _check_semicolons(tokens)
    tree = _parse_one(sql, dialect, tokens)
    _check_root(tree, tokens)
    _check_tree(tree, allowed)
    _check_sizes(tree, dialect, max_columns)
    # A second, parser-independent net: words no read contains, unquoted, anywhere.
    reason = _forbidden_word(tokens)
    if reason is not None:
        raise SqlRefused(reason)
    return tree


class _MySQLAndMariaDB(MySQL):
    """MySQL as both servers read it: ``a REGEXP 'p'`` stays an operator (sqlglot writes
    ``REGEXP_LIKE(a, 'p')``, which MariaDB does not have)."""

    class Generator(MySQL.Generator):  # type: ignore[misc,valid-type]
        TRANSFORMS = {**MySQL.Generator.TRANSFORMS, exp.RegexpLike: lambda self, e: self.binary(e, "REGEXP")}


_WRITTEN_AS: dict[str, str | Dialect] = {"mysql": _MySQLAndMariaDB()}


def _render(tree: exp.Expr, dialect: str) -> str:
    try:
        return tree.sql(dialect=_WRITTEN_AS.get(dialect, dialect), comments=False, unsupported_level=ErrorLevel.RAISE)
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
        if name in _COSTLY_FUNCTIONS:  # found wherever it sits, whatever the size model visits
            raise SqlRefused(COSTLY_FUNCTION)
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


# --- what a statement can cost: the size of the values it builds -----------------------------
#
# A database checks for its deadline and for KILL between rows, not inside one function call:
# MariaDB's REGEXP_REPLACE over a 16 MB value runs on after KILL until the server restarts. So
# no expression may build a value much larger than the data it reads. Sizes are counted in
# units of the largest input value, at least VALUE_UNIT_BYTES (what GROUP_CONCAT is capped at):
# a column is one unit, a literal its bytes, a function what its rule says: a fixed size
# (numbers, dates, hashes, comparisons), the largest argument (choices), the sum (concatenation),
# a small multiple (HEX, TO_BASE64). A function whose result size or running time is set by the
# value of an argument (REPEAT, SPACE, LPAD/RPAD, printf widths, REPLACE) is allowed only with
# small literal arguments; regular-expression functions, decompression and the like are
# refused. A query level multiplies what it reads by its largest expression, so chained CTEs
# that double a value at every level reach the limit after a few levels, and a recursive CTE
# may add a constant at each step but never grow its values by a factor.

COSTLY_FUNCTION = "functions whose cost or result size grows with an argument are not allowed"
REGEXP_ON_COLUMNS = "REGEXP is only allowed as column REGEXP 'pattern'"
VALUES_TOO_LARGE = "the statement could build values far larger than the data it reads"
GROWING_RECURSION = "a recursive common table expression may not grow its values at every step"

VALUE_UNIT_BYTES = 65_536
MAX_GROWTH = 64.0  # units one value may reach
MAX_ROW_GROWTH = 128.0  # units the values of one result row may reach together
MAX_LITERAL_ARGUMENT = 256  # the largest count, width or length REPEAT, LPAD, printf... may take
RECURSION_STEPS = 1_000  # what the datasource caps recursion at (max_recursive_iterations)
_FIXED_BYTES = 64.0
_MAX_PATTERN_CHARS = 256

_Sizer = Callable[[exp.Expr, "_Scope"], "_Size"]


@dataclass(frozen=True, slots=True)
class _Size:
    """At most ``units`` times the largest input value plus ``const`` bytes."""

    units: float = 0.0
    const: float = 0.0

    def __add__(self, other: _Size) -> _Size:
        return _Size(self.units + other.units, self.const + other.const)

    def scaled(self, factor: float) -> _Size:
        return _Size(self.units * factor, self.const * factor)

    def widest(self, other: _Size) -> _Size:
        return _Size(max(self.units, other.units), max(self.const, other.const))

    def absolute(self, inputs: float) -> float:
        """The bound in units, given that an input value is at most ``inputs`` units."""
        return self.units * inputs + self.const / VALUE_UNIT_BYTES


_FIXED = _Size(0.0, _FIXED_BYTES)
_UNIT = _Size(1.0, 0.0)

# Results of a fixed size whatever the arguments: numbers, dates, booleans, hashes, lengths.
_FIXED_SIZE_FUNCTIONS = frozenset(
    _words(
        """
    abs acos acosh adddate addtime asin asinh atan atan2 atanh avg bit_and bit_count bit_length bit_or
    bit_xor bitwiseand bitwiseor bitwisexor ceil ceiling char_length character_length coercibility conv
    convert_tz cos cosh cot count countif crc32 cume_dist curdate current_date current_time
    current_timestamp currentdate currenttime currenttimestamp curtime date date_add date_sub dateadd
    datediff datesub datetime day dayname dayofmonth dayofweek dayofyear degrees dense_rank exp extract
    field find_in_set floor format_bytes format_pico_time from_days from_unixtime fromunixtime glob hour
    inet6_aton inet_aton inet_ntoa inet6_ntoa instr is_ipv4 is_ipv6 is_uuid isnull json_array_length
    json_contains json_contains_path json_depth json_length json_overlaps json_type json_valid julianday
    last_day length like likelihood ln localtime localtimestamp locate log log10 log2 makedate maketime
    md5 median microsecond minute mod month monthname now ntile octet_length ord percent_rank
    percentile_cont percentile_disc period_add period_diff pi position pow power quarter radians rand
    random rank round row_number sec_to_time second sha sha1 sha2 sign sin sinh sqrt std stddev
    stddev_pop stddev_samp strcmp strposition str_to_date strtodate subdate subtime sum sysdate tan tanh
    time time_to_sec timediff timestamp timestampadd timestampdiff to_days to_seconds total trunc
    truncate typeof unicode unix_timestamp unixepoch utc_date utc_time utc_timestamp uuid var_pop
    var_samp variance week weekday weekofyear year yearweek tsordstotimestamp tsordstodate strtotime
    timestrtotime unixtotime timetounix timestamptrunc datetrunc
    """
    )
)
# Results no longer than the longest argument: choices, cuts, case changes.
_LONGEST_ARGUMENT_FUNCTIONS = frozenset(
    _words(
        """
    any_value anyvalue coalesce elt first_value firstvalue greatest if iif ifnull initcap lag last_value
    lastvalue lcase lead least left lower ltrim max mid min nth_value nthvalue nullif nvl nvl2 reverse
    right rtrim soundex substr substring substring_index substringindex trim ucase unhex upper
    from_base64 frombase64 likely unlikely
    """
    )
)
# Results a small, fixed multiple of their arguments.
_MULTIPLYING_FUNCTIONS = {"hex": 2.0, "tobase64": 2.0, "to_base64": 2.0, "quote": 2.0, "json_quote": 6.0}
# Refused outright: the cost (regular expressions, decompression) or the size (EXPORT_SET's 64
# copies, JSON_PRETTY's indentation, blobs of any length) is out of proportion to the input.
_COSTLY_FUNCTIONS = frozenset(
    _words(
        """
    regexp regexp_replace regexpreplace regexp_instr regexpinstr regexp_substr regexpsubstr regexpextract
    regexpextractall regexpilike regexpsplit regexpcount regexpfullmatch json_pretty json_detailed
    jsonformat uncompress export_set zeroblob randomblob
    """
    )
)
# Aggregates that grow with the number of rows, where the server caps them: GROUP_CONCAT by
# group_concat_max_len on MySQL/MariaDB; on SQLite every string by SQLITE_LIMIT_LENGTH. MySQL's
# JSON_ARRAYAGG and JSON_OBJECTAGG have no such cap.
_CAPPED_AGGREGATES: dict[str, frozenset[str]] = {
    "groupconcat": DIALECTS,
    "jsonarrayagg": frozenset({"sqlite"}),
    "json_group_array": frozenset({"sqlite"}),
    "json_group_object": frozenset({"sqlite"}),
    "json_arrayagg": frozenset(),
    "json_objectagg": frozenset(),
    "jsonobjectagg": frozenset(),
}


class _Scope:
    """A query level: the bound of every CTE in scope by name, and of what the level reads."""

    def __init__(self, dialect: str, ctes: dict[str, float] | None = None, inputs: float = 1.0) -> None:
        self.dialect = dialect
        self.ctes = dict(ctes or {})
        self.inputs = inputs


def _check_sizes(tree: exp.Expr, dialect: str, max_columns: int) -> None:
    outer = _first_select(tree)
    if outer is not None and len(outer.expressions) > max_columns:
        raise SqlRefused(too_many_columns(max_columns))
    try:
        _query_bound(tree, _Scope(dialect), outermost=True)
    except RecursionError:
        raise SqlRefused(_UNPARSABLE) from None


def too_many_columns(limit: int) -> str:
    """The refusal reason for a result wider than ``limit`` columns."""
    return f"the statement selects more than {limit} columns"


def _first_select(node: exp.Expr) -> exp.Select | None:
    while isinstance(node, exp.Union | exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _query_bound(query: exp.Expr, scope: _Scope, *, outermost: bool = False) -> float:
    """How large (in units) a value this query returns can be."""
    scope = _with_ctes(query, scope)
    if isinstance(query, exp.Subquery):
        return _query_bound(query.this, scope, outermost=outermost)
    if isinstance(query, exp.Union):
        return max(
            _query_bound(query.this, scope, outermost=outermost),
            _query_bound(query.expression, scope, outermost=outermost),
        )
    if isinstance(query, exp.Select):
        return _select_bound(query, scope, outermost=outermost)
    return 1.0


def _with_ctes(query: exp.Expr, scope: _Scope) -> _Scope:
    with_ = _with_of(query)
    if with_ is None:
        return scope
    inner = _Scope(scope.dialect, scope.ctes)
    for cte in with_.expressions:
        name = cte.alias_or_name
        if with_.args.get("recursive") and _references(cte.this, name):
            inner.ctes[name] = _recursive_bound(cte.this, name, inner)
        else:
            inner.ctes[name] = _query_bound(cte.this, inner)
    return inner


def _references(node: exp.Expr, name: str) -> bool:
    return any(isinstance(t, exp.Table) and t.name == name for t in node.walk())


def _recursive_bound(query: exp.Expr, name: str, scope: _Scope) -> float:
    branches = _union_branches(query)
    anchors = [b for b in branches if not _references(b, name)]
    bound = max((_query_bound(b, scope) for b in anchors), default=1.0)
    scope.ctes[name] = bound
    grown = bound
    for branch in branches:
        if not _references(branch, name):
            continue
        select = _first_select(branch)
        if select is None:
            raise SqlRefused(GROWING_RECURSION)
        inputs, sizes = _level(select, _with_ctes(branch, scope))
        for size in sizes:
            if size.units > 1.0:
                raise SqlRefused(GROWING_RECURSION)
            grown = max(grown, size.units * inputs + RECURSION_STEPS * size.const / VALUE_UNIT_BYTES)
    if grown > MAX_GROWTH:
        raise SqlRefused(VALUES_TOO_LARGE)
    return grown


def _union_branches(query: exp.Expr) -> list[exp.Expr]:
    if isinstance(query, exp.Union):
        return [*_union_branches(query.this), *_union_branches(query.expression)]
    return [query]


def _select_bound(select: exp.Select, scope: _Scope, *, outermost: bool) -> float:
    inputs, sizes = _level(select, scope)
    bounds = [s.absolute(inputs) for s in sizes]
    if outermost and sum(bounds) > MAX_ROW_GROWTH:
        raise SqlRefused(VALUES_TOO_LARGE)
    return max(bounds, default=1.0)


def _level(select: exp.Select, scope: _Scope) -> tuple[float, list[_Size]]:
    """The largest value this SELECT reads, and the size of each value it selects.

    Every expression of the level (WHERE, ORDER BY... too) must stay within MAX_GROWTH: those
    are computed for every row as well.
    """
    inputs = 1.0
    for source in _sources(select):
        if isinstance(source, exp.Table):
            inputs = max(inputs, scope.ctes.get(source.name, 1.0))
        else:
            inputs = max(inputs, _query_bound(source, scope))
    level = _Scope(scope.dialect, scope.ctes, inputs)
    projections = [_size(e, level) for e in select.expressions]
    for key, part in _children(select):
        if key not in ("expressions", "with", "with_"):
            _size(part, level)
    return inputs, projections


def _sources(select: exp.Select) -> list[exp.Expr]:
    """Tables and nested queries this SELECT reads directly (not those of nested queries)."""
    found: list[exp.Expr] = []
    stack: list[exp.Expr] = [v for k, v in _children(select) if k not in ("with", "with_")]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Table | exp.Query | exp.Subquery):
            found.append(node)
            continue
        stack.extend(v for _, v in _children(node))
    return found


def _children(node: exp.Expr) -> list[tuple[str, exp.Expr]]:
    out: list[tuple[str, exp.Expr]] = []
    for key, value in node.args.items():
        for part in value if isinstance(value, list) else [value]:
            if isinstance(part, exp.Expr):
                out.append((key, part))
    return out


def _size(node: exp.Expr, scope: _Scope) -> _Size:
    """An upper bound on the size of the value ``node`` computes, for one row; refused if too large."""
    size = _size_of(node, scope)
    if size.absolute(scope.inputs) > MAX_GROWTH:
        raise SqlRefused(VALUES_TOO_LARGE)
    return size


def _size_of(node: exp.Expr, scope: _Scope) -> _Size:
    if isinstance(node, exp.Column | exp.Star | exp.Query | exp.Subquery):
        return _UNIT  # a value read, at most the largest input (nested queries are inputs)
    if isinstance(node, exp.Literal):
        return _Size(0.0, float(len(str(node.this).encode("utf-8"))))
    if isinstance(node, exp.Null | exp.Boolean | exp.DataType | exp.Var | exp.Identifier):
        return _FIXED
    if isinstance(node, exp.RegexpLike | exp.RegexpILike):
        return _regexp_operator(node)
    if isinstance(node, exp.Func):
        return _function_size(node, scope)
    if isinstance(node, exp.DPipe):
        return _sum(node, scope)
    if isinstance(node, exp.Predicate | exp.Connector | exp.Not | exp.Binary | exp.Neg | exp.BitwiseNot):
        _sum(node, scope)  # the arguments are computed all the same: bound them too
        return _FIXED
    if isinstance(node, exp.Window) and isinstance(node.this, exp.Expr):
        _sum(node, scope)
        return _size(node.this, scope)
    if isinstance(node, exp.Alias | exp.Paren | exp.Ordered) and isinstance(node.this, exp.Expr):
        return _size(node.this, scope)
    return _sum(node, scope)


def _sum(node: exp.Expr, scope: _Scope) -> _Size:
    total = _Size()
    for _, child in _children(node):
        total = total + _size(child, scope)
    return total


def _widest(node: exp.Expr, scope: _Scope) -> _Size:
    widest = _Size()
    for _, child in _children(node):
        widest = widest.widest(_size(child, scope))
    return widest


def _rule_names(node: exp.Func) -> set[str]:
    return {_fold(n) for n in _function_names(node)}


def _function_size(node: exp.Func, scope: _Scope) -> _Size:
    names = _rule_names(node)
    if names & _COSTLY_FUNCTIONS:
        raise SqlRefused(COSTLY_FUNCTION)
    for name, dialects in _CAPPED_AGGREGATES.items():
        if name in names:
            if scope.dialect not in dialects:
                raise SqlRefused(COSTLY_FUNCTION)
            _sum(node, scope)
            return _UNIT
    special = _SPECIAL_SIZES.get(node.key) if not isinstance(node, exp.Anonymous) else None
    if special is None and isinstance(node, exp.Anonymous):
        special = _SPECIAL_SIZES.get(_fold(str(node.this)))
    if special is not None:
        return special(node, scope)
    if names & _FIXED_SIZE_FUNCTIONS:
        _sum(node, scope)
        return _FIXED
    if names & _LONGEST_ARGUMENT_FUNCTIONS:
        return _widest(node, scope)
    for name, factor in _MULTIPLYING_FUNCTIONS.items():
        if name in names:
            return _sum(node, scope).scaled(factor) + _Size(0.0, 2.0)
    # Anything else (CONCAT, CONCAT_WS, INSERT, JSON_OBJECT...): no longer than its arguments.
    return _sum(node, scope)


def _small_count(node: exp.Expr | None) -> int:
    """A literal count, width or length no larger than MAX_LITERAL_ARGUMENT, or a refusal."""
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = int(str(node.this))
        except ValueError:
            value = -1
        if 0 <= value <= MAX_LITERAL_ARGUMENT:
            return value
    raise SqlRefused(COSTLY_FUNCTION)


def _repeat_size(node: exp.Expr, scope: _Scope) -> _Size:
    return _size(node.this, scope).scaled(_small_count(node.args.get("times")))


def _space_size(node: exp.Expr, _scope: _Scope) -> _Size:
    return _Size(0.0, float(_small_count(node.this)))


def _pad_size(node: exp.Expr, scope: _Scope) -> _Size:
    _sum(node, scope)
    return _Size(0.0, 4.0 * _small_count(node.expression))  # exactly that many characters


def _replace_size(node: exp.Expr, scope: _Scope) -> _Size:
    search, replacement = node.expression, node.args.get("replacement")
    if not (isinstance(search, exp.Literal) and search.is_string and str(search.this)):
        raise SqlRefused(COSTLY_FUNCTION)
    if replacement is None:
        return _size(node.this, scope)
    if not (isinstance(replacement, exp.Literal) and replacement.is_string):
        raise SqlRefused(COSTLY_FUNCTION)
    factor = max(1.0, len(str(replacement.this)) / len(str(search.this)))
    return _size(node.this, scope).scaled(factor)


def _number_format_size(node: exp.Expr, scope: _Scope) -> _Size:
    _small_count(node.args.get("format"))  # MySQL FORMAT(x, decimals)
    _sum(node, scope)
    return _FIXED


def _printf_size(node: exp.Expr, scope: _Scope) -> _Size:
    """SQLite printf/format: a literal format whose widths and precisions are small literals."""
    arguments = [v for _, v in _children(node)]
    template = arguments[0] if arguments else None
    if not (isinstance(template, exp.Literal) and template.is_string):
        raise SqlRefused(COSTLY_FUNCTION)
    text = str(template.this)
    if "*" in text:
        raise SqlRefused(COSTLY_FUNCTION)
    widths = [int(w) for w in _NUMBERS.findall(text)]
    if any(w > MAX_LITERAL_ARGUMENT for w in widths):
        raise SqlRefused(COSTLY_FUNCTION)
    total = _Size(0.0, float(len(text.encode("utf-8")) + 4 * sum(widths)))
    for argument in arguments[1:]:
        total = total + _size(argument, scope)
    return total


def _cast_size(node: exp.Expr, scope: _Scope) -> _Size:
    """CAST(x AS BINARY(n)) pads to n bytes: the type's length counts."""
    declared = 0
    for param in node.find_all(exp.DataTypeParam):
        if isinstance(param.this, exp.Literal) and not param.this.is_string:
            try:
                declared += int(str(param.this.this))
            except ValueError:
                continue
    return _size(node.this, scope) + _Size(0.0, 4.0 * declared)


def _regexp_operator(node: exp.Expr) -> _Size:
    pattern = node.expression
    if not isinstance(node.this, exp.Column) or not (
        isinstance(pattern, exp.Literal) and pattern.is_string and len(str(pattern.this)) <= _MAX_PATTERN_CHARS
    ):
        raise SqlRefused(REGEXP_ON_COLUMNS)
    if node.args.get("flag") is not None:
        raise SqlRefused(REGEXP_ON_COLUMNS)
    return _FIXED


_NUMBERS = re.compile(r"\d+")
_SPECIAL_SIZES: dict[str, _Sizer] = {
    "repeat": _repeat_size,
    "space": _space_size,
    "pad": _pad_size,
    "lpad": _pad_size,
    "rpad": _pad_size,
    "replace": _replace_size,
    "numbertostr": _number_format_size,
    "format": _printf_size,
    "printf": _printf_size,
    "cast": _cast_size,
    "trycast": _cast_size,
}
