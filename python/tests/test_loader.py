"""The datasets under a DataLoader-style pool (the stand-in for
torch.utils.data in ``torchstub``, whose workers each get their own
``get_worker_info`` as torch's do), its workers started by fork, spawn and
forkserver, over 2,000 small objects on a cluster of their own: every object
read exactly once per epoch, each worker's share its own, and from the
second epoch on not one request of any method reaches the origin."""

import hashlib
import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from cluster import BUCKET, Cluster

HERE = os.path.dirname(os.path.abspath(__file__))
OBJECTS, WORKERS, BATCH = 2000, 4, 64


@pytest.fixture(scope="module")
def loaded():
    c = Cluster(nodes=3)
    s3 = c.s3()
    prefix = f"loader-{uuid.uuid4().hex[:8]}"
    rng = random.Random(5)
    bodies = {f"{prefix}/{i:05d}.bin": rng.randbytes(rng.randrange(1000, 4000)) for i in range(OBJECTS)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]), bodies.items()))
    yield c, prefix, {k: hashlib.md5(v).hexdigest() for k, v in bodies.items()}
    c.stop()


def run(cluster, env=None, **args):
    """loader_run.py with the stand-in first on the path; its JSON."""
    a = {"config": cluster.config_path, "origin": cluster.origin, "batch": BATCH, "workers": WORKERS, **args}
    path = os.pathsep.join([os.path.join(HERE, "torchstub"), HERE, os.environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "loader_run.py")],
        input=json.dumps(a),
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)


def check_epoch(epoch, want, workers=WORKERS):
    """Every object once, right; each worker its own process and runtime."""
    samples = epoch["samples"]
    keys = Counter(s[0] for s in samples)
    assert keys == Counter(list(want)), "an object read twice or not at all"
    assert {s[0]: s[1] for s in samples} == want
    by_worker = {}
    for key, _, pid, wid, runtime in samples:
        assert runtime == pid, "a worker read with another process's runtime"
        by_worker.setdefault(wid, set()).add(key)
        assert by_worker.setdefault(("pid", wid), pid) == pid
    ids = sorted(w for w in by_worker if not isinstance(w, tuple))
    assert ids == list(range(workers)), f"get_worker_info ids: {ids}"
    assert len({by_worker[("pid", w)] for w in ids}) == workers
    shares = [by_worker[w] for w in ids]
    assert sum(len(s) for s in shares) == len(set().union(*shares)), "shares overlap"
    return shares


@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_map_dataset_reads_every_object_once_per_epoch_in_disjoint_shares(loaded, start):
    cluster, prefix, want = loaded
    # Keys given as s3:// URLs: the same bucket and key as shoal://.
    keys = [f"s3://{BUCKET}/{k}" for k in sorted(want)]
    got = run(cluster, kind="map", data="bytes", keys=keys, epochs=2, start=start)
    assert got["len"] == OBJECTS
    for epoch in got["epochs"]:
        check_epoch(epoch, want)
    assert got["epochs"][1]["origin"] == 0, "epoch 2 asked the origin"


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_iterable_dataset_shares_by_worker_and_readers_cost_epoch_2_nothing(loaded, start):
    cluster, prefix, want = loaded
    got = run(cluster, kind="iterable", data="reader", prefix=f"{BUCKET}/{prefix}", epochs=2, start=start)
    for epoch in got["epochs"]:
        shares = check_epoch(epoch, want)
        # Worker w of 4 takes every 4th object from the w-th.
        order = sorted(want)
        assert [sorted(s) for s in shares] == [order[w::WORKERS] for w in range(WORKERS)]
    assert got["made"] <= 2, "a listing of 2,000 keys is two pages"
    assert got["epochs"][1]["origin"] == 0, "epoch 2 asked the origin"


def test_a_list_of_keys_asks_its_versions_once_and_epoch_2_asks_the_origin_nothing(loaded):
    cluster, prefix, want = loaded
    keys = [f"{BUCKET}/{k}" for k in sorted(want)[:500]]
    heads = cluster.origin_heads(prefix)
    got = run(cluster, kind="map", data="reader", keys=keys, epochs=2, start="fork")
    for epoch in got["epochs"]:
        check_epoch(epoch, {k.split("/", 1)[1]: want[k.split("/", 1)[1]] for k in keys})
    assert got["epochs"][1]["origin"] == 0
    assert cluster.origin_heads(prefix) - heads <= len(keys), "more than one HEAD per key"


def test_ranks_come_from_torch_distributed_and_len_is_the_ranks_share(loaded):
    cluster, prefix, want = loaded
    order = sorted(want)
    seen = []
    for rank in range(3):
        env = {"SHOAL_STUB_RANK": str(rank), "SHOAL_STUB_WORLD": "3"}
        got = run(cluster, env=env, init=True, kind="iterable", data="bytes", prefix=f"{BUCKET}/{prefix}", start="spawn")
        mine = order[rank::3]
        assert got["len"] == len(mine)
        keys = sorted(s[0] for s in got["epochs"][0]["samples"])
        assert keys == sorted(mine)
        seen += keys
    assert sorted(seen) == order
