"""What the planner asks about tables: the :class:`Catalog` protocol and an in-memory one.

The parser resolves names and checks types through a Catalog; the cost rules
ask it for row counts and document token statistics. Any object with these
methods is a Catalog:

tables() -> tuple[str, ...]
    Names of the tables the query may read (used to list what exists in
    "unknown table" errors).
columns(table) -> dict[str, str]
    Column name -> type name, lower case Spark simple strings: ``'string'``,
    ``'int'``, ``'bigint'``, ``'double'``, ``'boolean'``, ``'date'``,
    ``'array<string>'``... Raises ``KeyError`` when the table does not exist.
row_count(table) -> int
    Rows in the table (an estimate is fine).
avg_tokens(table, column) -> float
    Mean model tokens of the column's values as text, sampled from the data.

Table names are matched as written in the query; column names are matched
case-insensitively by the parser, which keeps the catalog's spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, runtime_checkable

STRING_TYPES = ("string", "varchar", "char")
DEFAULT_AVG_TOKENS = 64.0


def is_string_type(type_name: str) -> bool:
    """True for the types a document column may have: string, varchar(n), char(n)."""
    return type_name.lower().startswith(STRING_TYPES)


@runtime_checkable
class Catalog(Protocol):
    """Tables, schemas and statistics the planner needs; see the module docstring."""

    def tables(self) -> tuple:
        ...

    def columns(self, table: str) -> dict:
        ...

    def row_count(self, table: str) -> int:
        ...

    def avg_tokens(self, table: str, column: str) -> float:
        ...


@dataclass(frozen=True)
class DictCatalog:
    """A Catalog held in dictionaries, for tests and for planning without Spark.

    Parameters
    ----------
    schemas : mapping of table -> {column: type name}
    rows : mapping of table -> row count (default 1000 when absent)
    tokens : mapping of table -> {column: mean tokens} (default 64 when absent)

    Examples
    --------
    >>> cat = DictCatalog({'reviews': {'id': 'int', 'text': 'string'}},
    ...                   rows={'reviews': 5000}, tokens={'reviews': {'text': 300.0}})
    >>> cat.columns('reviews'), cat.row_count('reviews'), cat.avg_tokens('reviews', 'text')
    ({'id': 'int', 'text': 'string'}, 5000, 300.0)
    """

    schemas: Mapping = field(default_factory=dict)
    rows: Mapping = field(default_factory=dict)
    tokens: Mapping = field(default_factory=dict)

    def tables(self) -> tuple:
        return tuple(self.schemas)

    def columns(self, table: str) -> dict:
        return dict(self.schemas[table])

    def row_count(self, table: str) -> int:
        return int(self.rows.get(table, 1000))

    def avg_tokens(self, table: str, column: str) -> float:
        return float(self.tokens.get(table, {}).get(column, DEFAULT_AVG_TOKENS))
