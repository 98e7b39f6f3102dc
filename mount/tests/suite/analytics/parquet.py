"""Parquet through DuckDB and pyarrow, for the mount's analytics tests.

  parquet.py write DIR FILES ROWS_PER_GROUP GROUPS SEED [WIDTH]
      writes DIR/part-N.parquet (ids unique across the files, in order; the
      text column WIDTH characters, 32 unless given).
  parquet.py query ENGINE QUERY DIR
      runs QUERY (rows | columns | full) with ENGINE (duckdb | pyarrow) over the
      files of DIR and prints one JSON line: the answer, and `rchar`, what this
      process read (from /proc/self/io) while the query ran.
"""

import json
import os
import random
import sys

COLUMNS = ["id", "k", "v", "w", "comment"]


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def write(out, files, rows, groups, seed, width=32):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rnd = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    n = rows * groups
    for f in range(files):
        base = f * n
        ids = list(range(base, base + n))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "k": pa.array([i % 16 for i in ids], pa.int32()),
                "v": pa.array([rnd.random() for _ in ids], pa.float64()),
                "w": pa.array([rnd.getrandbits(62) for _ in ids], pa.int64()),
                # Random text: it neither compresses nor fits a dictionary.
                "comment": pa.array(["%0*x" % (width, rnd.getrandbits(4 * width)) for _ in ids]),
            }
        )
        pq.write_table(
            table,
            os.path.join(out, "part-%d.parquet" % f),
            row_group_size=rows,
            compression="none",
            use_dictionary=["k"],
            write_statistics=True,
        )


def query(engine, what, d):
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads TO 2")
        # DuckDB's own cache of file bytes would hide what a second read costs.
        try:
            con.execute("SET enable_external_file_cache = false")
        except duckdb.Error:
            pass
        src = "read_parquet(%s)" % json.dumps(files).replace('"', "'")
        sql = {
            "rows": "select count(*), sum(v), min(comment) from SRC where id between 20000 and 20999",
            "columns": "select k, sum(v), max(w) from SRC group by k order by k",
            "full": "select count(distinct comment) from SRC",
        }[what].replace("SRC", src)
        start = rchar()
        got = con.execute(sql).fetchall()
        used = rchar() - start
        answer = [[round(x, 6) if isinstance(x, float) else x for x in row] for row in got]
    elif engine == "pyarrow":
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        start = rchar()
        data = ds.dataset(files, format="parquet")
        if what == "rows":
            t = data.to_table(
                columns=["v", "comment"],
                filter=(pc.field("id") >= 20000) & (pc.field("id") <= 20999),
            )
            answer = [t.num_rows, round(pc.sum(t["v"]).as_py(), 6), pc.min(t["comment"]).as_py()]
        elif what == "columns":
            t = data.to_table(columns=["k", "v", "w"])
            g = t.group_by("k").aggregate([("v", "sum"), ("w", "max")]).sort_by("k")
            answer = [[r["k"], round(r["v_sum"], 6), r["w_max"]] for r in g.to_pylist()]
        else:
            t = data.to_table(columns=["comment"])
            answer = len(pc.unique(t["comment"]))
        used = rchar() - start
    else:
        raise SystemExit("unknown engine " + engine)
    print(json.dumps({"answer": answer, "rchar": used}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        width = int(sys.argv[7]) if len(sys.argv) > 7 else 32
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), width)
    else:
        query(sys.argv[2], sys.argv[3], sys.argv[4])
