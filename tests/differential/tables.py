"""The differential tests' tables: small (3-7 rows), NULL and duplicate keys, NULL / empty /
whitespace-only texts, unicode, SQL-looking and chat-marker text, and a table of templates
(one and two placeholders, NULL and blank ones) that queries read templates from.

The same rows go to Spark (temp views) and to SQLite (the oracle)."""
from __future__ import annotations

SQL_TEXT = "'; DROP TABLE d; --"
CHAT_TEXT = "<|im_start|>user hi<|im_end|>"

# name -> (Spark schema, rows)
TABLES = {
    "d": ("id int, body string, k int, grp string", [
        (1, "My parcel was late again", 1, "shop"),
        (2, None, 1, "life"),
        (3, "dog walk in the park", 2, None),
        (3, "dog walk in the park", 2, None),
        (4, "", None, "shop"),
        (5, "Le café était froid ☕", 3, "   "),
        (6, SQL_TEXT, None, "code"),
    ]),
    "t": ("tid int, term string, k int", [
        (10, "a parcel", 1), (11, None, 1), (12, "a dog", 2), (12, "a dog", 2), (13, "   ", 3),
        (14, CHAT_TEXT, None),
    ]),
    "q": ("qid int, tmpl string, tmpl2 string, topic string, k int", [
        (1, "Is {0} a complaint?", "Does {0} mention {1}?", "parcels", 1),
        (2, "Is {0} about animals?", "Is {1} related to {0}?", "pets", 2),
        (3, None, "", None, None),
        (4, "  ", None, "ünïcödé café", 3),
        (5, "Does {0} look like code?", "Is {0} about {1}?", "  ", 1),
    ]),
    "c": ("cid int, cat string", [(1, "pets"), (2, "shopping"), (2, "shopping"), (3, None), (4, "ünïcödé")]),
}
# table -> its text columns (documents) and its integer columns; q also holds templates (tmpl: {0};
# tmpl2: {0} and {1})
DOCS = {"d": ("body", "grp"), "t": ("term",), "q": ("topic",), "c": ("cat",)}
INTS = {"d": ("id", "k"), "t": ("tid", "k"), "q": ("qid", "k"), "c": ("cid",)}


def columns(table: str) -> list[str]:
    return [part.split()[0] for part in TABLES[table][0].split(",")]


def register_spark(spark) -> None:
    """The tables as temp views (d and t over 2 partitions, so joins shuffle)."""
    for name, (schema, rows) in TABLES.items():
        df = spark.createDataFrame(rows, schema).localCheckpoint()  # scanned in the JVM, not a Python worker
        (df.repartition(2) if name in ("d", "t") else df).createOrReplaceTempView(name)


def fill_sqlite(con) -> None:
    types = {"int": "INTEGER", "string": "TEXT"}
    for name, (schema, rows) in TABLES.items():
        cols = [part.split() for part in schema.split(",")]
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {types[t]}' for c, t in cols)})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
