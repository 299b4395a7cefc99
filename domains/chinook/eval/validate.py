#!/usr/bin/env python3
"""Validates questions.jsonl against the Chinook data `parley demo-data --domain chinook` loads.

Checks
  * every line parses; required keys present; kind/split in the allowed sets
  * every table is one of the 11 chinook tables (schema-qualified, no duplicates)
  * every value exists verbatim (exact, case/accent/whitespace-sensitive) in the
    named table.column, by loading the domain's schema.sql and data/chinook.sql into sqlite
  * values live in text columns, table of each value is in the question's tables
  * if a reference `sql` is given: the set of chinook.* tables it uses equals
    `tables`, every value literal appears in it, and it runs in sqlite and
    returns at least one row (EXTRACT(YEAR FROM x) is translated for sqlite)
  * dev/held-out have the same count per kind
Prints counts per split, kind, number of tables and value coverage. Standard library only.
Usage: python3 domains/chinook/eval/validate.py [questions.jsonl]
"""
import json, os, re, sqlite3, sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
DOMAIN = os.path.dirname(HERE)
QF = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "questions.jsonl")

TABLES = {"artist", "album", "track", "genre", "media_type", "playlist", "playlist_track",
          "customer", "employee", "invoice", "invoice_line"}
KINDS = {"single-table", "join", "aggregate", "value-lookup", "paraphrase", "multi-hop"}
SPLITS = {"dev", "held-out"}
TEXT_COLS = {
    "artist": {"name"}, "album": {"title"}, "track": {"name", "composer"}, "genre": {"name"},
    "media_type": {"name"}, "playlist": {"name"},
    "customer": {"first_name", "last_name", "company", "city", "state", "country", "address"},
    "employee": {"first_name", "last_name", "title", "city", "state", "country"},
    "invoice": {"billing_city", "billing_country", "billing_state", "billing_address"},
}

# ---- load the data into sqlite under an attached schema named "chinook": the CREATE TABLEs
# of schema.sql, then data/chinook.sql's COPY blocks (COPY's text format)
db = sqlite3.connect(":memory:")
db.execute("ATTACH ':memory:' AS chinook")
ddl = open(os.path.join(DOMAIN, "schema.sql"), encoding="utf-8").read()
for stmt in re.findall(r"^CREATE TABLE chinook\.\w+\s*\(.*?^\);", ddl, flags=re.M | re.S):
    db.execute(stmt)
UNESCAPE = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}
def field(v):
    return None if v == "\\N" else re.sub(r"\\[\\tnr]", lambda m: UNESCAPE[m.group(0)], v)
data = open(os.path.join(DOMAIN, "data", "chinook.sql"), encoding="utf-8").read()
for table, cols, body in re.findall(r"^COPY (chinook\.\w+) \((.*?)\) FROM stdin;\n(.*?)^\\\.$", data, flags=re.M | re.S):
    rows = [[field(v) for v in line.split("\t")] for line in body.splitlines()]
    marks = ", ".join("?" * len(rows[0]))
    db.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)
cols = {t: {r[1] for r in db.execute(f"PRAGMA chinook.table_info({t})")} for t in TABLES}
assert all(cols[t] for t in TABLES), "some chinook table is missing from the SQL file"

def to_sqlite(sql):
    return re.sub(r"EXTRACT\(YEAR FROM ([\w.]+)\)", r"CAST(strftime('%Y', \1) AS INTEGER)", sql, flags=re.I)

errors = []
def err(i, msg):
    errors.append(f"line {i}: {msg}")

rows = []
with open(QF, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
        except Exception as e:
            err(i, f"bad JSON: {e}"); continue
        rows.append((i, q))
        for k in ("question", "tables", "split", "kind"):
            if k not in q:
                err(i, f"missing key {k}")
        if q.get("kind") not in KINDS:
            err(i, f"bad kind {q.get('kind')!r}")
        if q.get("split") not in SPLITS:
            err(i, f"bad split {q.get('split')!r}")
        tabs = q.get("tables", [])
        if not tabs or len(set(tabs)) != len(tabs):
            err(i, f"empty or duplicate tables {tabs}")
        bare = set()
        for t in tabs:
            if not t.startswith("chinook.") or t[len("chinook."):] not in TABLES:
                err(i, f"unknown table {t}")
            bare.add(t.split(".", 1)[-1])
        if q.get("n_tables") is not None and q["n_tables"] != len(tabs):
            err(i, "n_tables does not match tables")
        for v in q.get("values", []):
            for k in ("text", "table", "column", "value"):
                if k not in v:
                    err(i, f"value missing {k}: {v}")
            t = v.get("table", "").split(".", 1)[-1]
            c = v.get("column", "")
            if t not in TABLES or c not in cols.get(t, ()):
                err(i, f"unknown column {v.get('table')}.{c}"); continue
            if c not in TEXT_COLS.get(t, ()):
                err(i, f"value column is not a text column: {t}.{c}")
            if v["table"] not in tabs:
                err(i, f"value table {v['table']} not in tables")
            n = db.execute(f"SELECT COUNT(*) FROM chinook.{t} WHERE {c} = ?", (v["value"],)).fetchone()[0]
            if n == 0:
                err(i, f"value {v['value']!r} not found verbatim in {t}.{c}")
        sql = q.get("sql")
        if sql:
            used = set(re.findall(r"chinook\.(\w+)", sql))
            if used != bare:
                err(i, f"sql uses {sorted(used)} but tables are {sorted(bare)}")
            for v in q.get("values", []):
                if v["value"].replace("'", "''") not in sql:
                    err(i, f"value {v['value']!r} not used in sql")
            try:
                res = db.execute(to_sqlite(sql)).fetchall()
                if not res or all(x is None for x in res[0]):
                    err(i, "sql returns no rows / only NULL")
            except Exception as e:
                err(i, f"sql error: {e}")

# ---- counts
def table(title, counter_by_split, keys):
    print(f"\n{title:<16}{'dev':>6}{'held-out':>10}{'total':>7}")
    for k in keys:
        d, h = counter_by_split["dev"][k], counter_by_split["held-out"][k]
        print(f"{str(k):<16}{d:>6}{h:>10}{d + h:>7}")

by = {s: Counter() for s in SPLITS}
nt = {s: Counter() for s in SPLITS}
val = {s: Counter() for s in SPLITS}
tag = {s: Counter() for s in SPLITS}
for _, q in rows:
    s = q.get("split")
    if s not in SPLITS:
        continue
    by[s][q["kind"]] += 1
    n = len(q["tables"])
    nt[s]["1" if n == 1 else "2-3" if n <= 3 else "4+"] += 1
    val[s]["with values" if q.get("values") else "no values"] += 1
    for t in q.get("tags", []):
        tag[s][t] += 1
print(f"{len(rows)} questions in {QF}")
table("kind", by, sorted(KINDS))
table("n_tables", nt, ["1", "2-3", "4+"])
table("values", val, ["with values", "no values"])
table("tag", tag, sorted(set(tag["dev"]) | set(tag["held-out"])))
tbl_use = Counter(t for _, q in rows for t in q["tables"])
print("\ntable usage:", ", ".join(f"{t.split('.')[1]}={n}" for t, n in tbl_use.most_common()))
nv = sum(len(q.get("values", [])) for _, q in rows)
print(f"value labels: {nv} on {sum(1 for _, q in rows if q.get('values'))} questions")

for k in KINDS:
    if by["dev"][k] != by["held-out"][k]:
        errors.append(f"split imbalance for kind {k}: dev={by['dev'][k]} held-out={by['held-out'][k]}")
if len(rows) < 60:
    errors.append(f"only {len(rows)} questions (< 60)")
if sum(1 for _, q in rows if q.get("values")) < 40:
    errors.append("fewer than 40 questions with values")

if errors:
    print("\nFAIL")
    for e in errors:
        print("  " + e)
    sys.exit(1)
print("\nOK: all checks passed")
