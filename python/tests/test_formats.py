"""Parquet through ``shoal://`` with pandas, pyarrow datasets, polars and
DuckDB: every answer equal to the same query of the file on local disk."""

import duckdb
import fsspec
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from conftest import put


@pytest.fixture(scope="module")
def parquet(cluster, tmp_path_factory):
    """Two Parquet files of several row groups, on local disk and in the bucket."""
    import uuid

    rng = np.random.default_rng(42)
    local = tmp_path_factory.mktemp("parquet")
    prefix = f"shoal-py/parquet-{uuid.uuid4().hex[:8]}"
    s3 = cluster.s3()
    for part in range(2):
        n = 150_000
        table = pa.table(
            {
                "id": np.arange(part * n, (part + 1) * n, dtype=np.int64),
                "group": rng.integers(0, 50, n).astype(np.int32),
                "value": rng.normal(size=n),
                "name": [f"row-{i % 997}" for i in range(n)],
            }
        )
        path = local / f"part-{part}.parquet"
        pq.write_table(table, path, row_group_size=40_000)
        put(s3, f"{prefix}/part-{part}.parquet", path.read_bytes())
    return local, prefix


def fresh(cluster):
    """A ``shoal://`` filesystem of its own: a client whose RAM tier holds
    nothing yet, so that what it reads comes from the nodes."""
    return fsspec.filesystem("shoal", config=cluster.config_path, skip_instance_cache=True)


def test_pandas(cluster, parquet):
    local, prefix = parquet
    want = pd.read_parquet(local / "part-0.parquet")
    # (pandas reads through fsspec's instance for these options.)
    client = fsspec.filesystem("shoal", config=cluster.config_path).client
    with cluster.through_nodes(client=client):
        got = pd.read_parquet(f"shoal://{prefix}/part-0.parquet", storage_options={"config": cluster.config_path})
    pd.testing.assert_frame_equal(got, want)
    with cluster.through_nodes(client=client):
        cols = pd.read_parquet(
            f"shoal://{prefix}/part-1.parquet",
            columns=["id", "value"],
            storage_options={"config": cluster.config_path},
        )
    pd.testing.assert_frame_equal(cols, pd.read_parquet(local / "part-1.parquet", columns=["id", "value"]))


def test_pyarrow_dataset(cluster, parquet):
    local, prefix = parquet
    fs = fresh(cluster)
    remote = ds.dataset(prefix, format="parquet", filesystem=fs)
    here = ds.dataset(str(local), format="parquet")
    flt = ds.field("group") == 7
    with cluster.through_nodes(client=fs.client):
        got = remote.to_table(columns=["id", "value"], filter=flt).sort_by("id")
    want = here.to_table(columns=["id", "value"], filter=flt).sort_by("id")
    assert got.equals(want)
    assert remote.count_rows() == here.count_rows() == 300_000


def test_polars(cluster, parquet):
    local, prefix = parquet
    fs = fresh(cluster)
    with cluster.through_nodes(client=fs.client), fs.open(f"{prefix}/part-0.parquet") as f:
        got = pl.read_parquet(f)
    want = pl.read_parquet(local / "part-0.parquet")
    assert got.equals(want)
    # Sums of floats in parallel come out in any order: rounded, they agree.
    def agg(df):
        sums = [pl.len(), pl.col("id").sum(), pl.col("value").sum().round(6)]
        return df.group_by("group").agg(sums).sort("group")

    with fs.open(f"{prefix}/part-1.parquet") as f:
        assert agg(pl.read_parquet(f)).equals(agg(pl.read_parquet(local / "part-1.parquet")))


def test_duckdb(cluster, parquet):
    local, prefix = parquet
    con = duckdb.connect()
    fs = fresh(cluster)
    con.register_filesystem(fs)
    q = "SELECT \"group\", count(*), round(sum(value), 6), min(name) FROM read_parquet('{}') GROUP BY 1 ORDER BY 1"
    with cluster.through_nodes(client=fs.client):
        got = con.sql(q.format(f"shoal://{prefix}/*.parquet")).fetchall()
    want = con.sql(q.format(f"{local}/*.parquet")).fetchall()
    assert got == want and len(got) == 50
