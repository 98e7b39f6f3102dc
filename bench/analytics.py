"""Parquet queries for bench/analytics.sh.

  analytics.py write DIR FILES GROUPS ROWS_PER_GROUP
      writes DIR/part-N.parquet: six columns (id, k, v, w, ts and a 64-byte
      string), row groups of ROWS_PER_GROUP rows, ids unique and in order.
  analytics.py query ENGINE QUERY DIR
      runs QUERY (rows | columns | full) with ENGINE (duckdb | pyarrow) over the
      Parquet files under DIR and prints one JSON line: the answer, the query's
      wall seconds and `rchar`, what this process read while it ran.
  analytics.py s3 QUERY ENDPOINT BUCKET PREFIX
      the same with pyarrow's own S3 filesystem (no mount), credentials from
      AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""

import json
import os
import sys
import time

SQL = {
    # One row range: row-group pruning on `id`'s statistics.
    "rows": "select count(*), sum(v), min(comment) from SRC where id between 200000 and 200999",
    # Three small columns of every row.
    "columns": "select k, sum(v), max(w) from SRC group by k order by k",
    # The big column, whole.
    "full": "select count(distinct comment) from SRC",
}


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def write(out, files, groups, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    n = groups * rows
    for f in range(files):
        base = f * n
        ids = pa.array(range(base, base + n), pa.int64())
        # Random text: it neither compresses nor fits a dictionary.
        raw = os.urandom(32 * n).hex()
        comment = pa.array([raw[i * 64 : (i + 1) * 64] for i in range(n)])
        rnd = os.urandom(16 * n)
        v = pa.array([b / 255.0 for b in rnd[:n]], pa.float64())
        w = pa.array([int.from_bytes(rnd[n + 7 * i : n + 7 * i + 7], "little") for i in range(n)], pa.int64())
        table = pa.table(
            {
                "id": ids,
                "k": pa.array([i % 16 for i in range(base, base + n)], pa.int32()),
                "v": v,
                "w": w,
                "ts": pa.array(range(1_700_000_000 + base, 1_700_000_000 + base + n), pa.int64()),
                "comment": comment,
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


def rounded(rows):
    return [[round(x, 6) if isinstance(x, float) else x for x in row] for row in rows]


def duckdb_query(what, files, filesystem=None):
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    if filesystem is not None:
        con.register_filesystem(filesystem)
    # DuckDB's own cache of file bytes would hide what a second read costs.
    try:
        con.execute("SET enable_external_file_cache = false")
    except duckdb.Error:
        pass
    src = "read_parquet(%s)" % json.dumps(files).replace('"', "'")
    return rounded(con.execute(SQL[what].replace("SRC", src)).fetchall())


def pyarrow_query(what, files, filesystem=None):
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = ds.dataset(files, format="parquet", filesystem=filesystem)
    if what == "rows":
        t = data.to_table(
            columns=["v", "comment"],
            filter=(pc.field("id") >= 200000) & (pc.field("id") <= 200999),
        )
        return [[t.num_rows, round(pc.sum(t["v"]).as_py() or 0.0, 6), pc.min(t["comment"]).as_py()]]
    if what == "columns":
        t = data.to_table(columns=["k", "v", "w"])
        g = t.group_by("k").aggregate([("v", "sum"), ("w", "max")]).sort_by("k")
        return [[r["k"], round(r["v_sum"], 6), r["w_max"]] for r in g.to_pylist()]
    t = data.to_table(columns=["comment"])
    return [[len(pc.unique(t["comment"]))]]


def report(answer, seconds, used):
    print(json.dumps({"answer": answer, "seconds": round(seconds, 4), "rchar": used}))


def query(engine, what, d):
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))
    if engine == "duckdb":
        import duckdb  # noqa: F401  (imported before the clock starts)
    else:
        import pyarrow.dataset  # noqa: F401
    start, t = rchar(), time.perf_counter()
    answer = duckdb_query(what, files) if engine == "duckdb" else pyarrow_query(what, files)
    report(answer, time.perf_counter() - t, rchar() - start)


def s3(what, endpoint, bucket, prefix):
    from pyarrow import fs

    s3fs = fs.S3FileSystem(
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
    )
    t = time.perf_counter()
    infos = s3fs.get_file_info(fs.FileSelector("%s/%s" % (bucket, prefix)))
    files = sorted(i.path for i in infos if i.path.endswith(".parquet"))
    answer = pyarrow_query(what, files, s3fs)
    report(answer, time.perf_counter() - t, 0)


def shoal(what, config, bucket, prefix):
    """DuckDB over shoal:// (fsspec), no mount: the cluster read from Python."""
    import duckdb  # noqa: F401  (imported before the clock starts)
    import fsspec

    t = time.perf_counter()
    fs = fsspec.filesystem("shoal", config=config)
    files = sorted("shoal://" + p for p in fs.glob("%s/%s/*.parquet" % (bucket, prefix)))
    answer = duckdb_query(what, files, fs)
    report(answer, time.perf_counter() - t, 0)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "query":
        query(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "s3":
        s3(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "shoal":
        shoal(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        raise SystemExit(__doc__)
