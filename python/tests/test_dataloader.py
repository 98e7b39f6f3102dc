"""The datasets as a DataLoader drives them: workers forked from the process
that made the dataset (``multiprocessing`` with the fork start method, as a
DataLoader starts its workers), over 2,000 small objects on a cluster of their
own. The DataLoader's own protocol (``__getitems__``, ``get_worker_info``,
spawn and forkserver workers, a process group's ranks) is test_loader.py's,
against the stand-in in ``torchstub``: PyPI's torch for Linux is the CUDA
build, gigabytes the suite does not download."""

import hashlib
import multiprocessing
import os
import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from cluster import Cluster
from shoal.datasets import ShoalIterableDataset, ShoalMapDataset

OBJECTS, WORKERS, BATCH = 2000, 4, 32
# Each object's size, by path: what the nodes must serve for a pass over them.
SIZES = {}


@pytest.fixture(scope="module")
def loaded():
    """A cluster of its own (a node is killed here) holding 2,000 objects."""
    c = Cluster(nodes=3)
    s3 = c.s3()
    prefix = f"data-{uuid.uuid4().hex[:8]}"
    rng = random.Random(3)
    bodies = {f"{prefix}/{i:05d}.bin": rng.randbytes(rng.randrange(1000, 8000)) for i in range(OBJECTS)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket="shoal-py", Key=kv[0], Body=kv[1]), bodies.items()))
    want = {f"shoal-py/{k}": hashlib.md5(v).hexdigest() for k, v in bodies.items()}
    global SIZES
    SIZES = {f"shoal-py/{k}": len(v) for k, v in bodies.items()}
    yield c, f"shoal-py/{prefix}", want
    c.stop()


def digest(key, sample):
    return hashlib.md5(sample).hexdigest()


# What each forked worker reads with: the dataset made in the parent.
_dataset = None


def _map_batch(indexes):
    return [(i, _dataset[i], os.getpid(), _dataset.client.runtime_pid()) for i in indexes]


def _iter_share(worker):
    _dataset.worker = (worker, WORKERS)
    return [(s, os.getpid(), _dataset.client.runtime_pid()) for s in _dataset]


def map_epoch(dataset, on_batch=None):
    """One pass of a DataLoader with 4 forked workers: {index: sample}."""
    global _dataset
    _dataset = dataset
    order = list(range(len(dataset)))
    random.Random(len(order)).shuffle(order)
    batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    out = {}
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        for n, batch in enumerate(pool.imap(_map_batch, batches)):
            for i, sample, pid, runtime_pid in batch:
                assert pid == runtime_pid, "a worker read with its parent's runtime"
                out[i] = sample
            if on_batch:
                on_batch(n, len(batches))
    return out


def test_map_dataset_epochs_through_forked_workers(loaded):
    cluster, prefix, want = loaded
    ds = ShoalMapDataset(cluster.config_path, prefix=prefix, transform=digest, data="bytes")
    assert len(ds) == OBJECTS
    # The parent reads too: its runtime must not be what the workers use.
    assert ds[0] == want[ds.path(0)]
    under = prefix.split("/", 1)[1]
    gets, heads = cluster.origin_gets(under), cluster.origin_heads(under)
    # The workers read from the nodes: every byte of every object served but
    # the parent's (its RAM tier forked into each worker).
    least = sum(SIZES.values()) - SIZES[ds.path(0)]
    with cluster.through_nodes(least=least):
        first = map_epoch(ds)
    assert {ds.path(i): d for i, d in first.items()} == want
    print(f"epoch 1: {cluster.origin_gets(under) - gets} origin GETs, {cluster.origin_heads(under) - heads} HEADs")

    gets, heads = cluster.origin_gets(under), cluster.origin_heads(under)
    with cluster.through_nodes(least=least):
        second = map_epoch(ds)
    assert second == first
    print(f"epoch 2: {cluster.origin_gets(under) - gets} origin GETs, {cluster.origin_heads(under) - heads} HEADs")
    assert cluster.origin_gets(under) - gets == 0, "epoch 2 went to the origin"

    # A node killed in mid-epoch fails no sample.
    def kill_midway(n, of):
        if n == of // 2:
            cluster.kill_node(1)

    gets = cluster.origin_gets(under)
    third = map_epoch(ds, on_batch=kill_midway)
    assert cluster.procs["node1"].poll() is not None
    assert third == first
    gets = cluster.origin_gets(under) - gets
    print(f"epoch 3, a node of 3 killed halfway: {len(third)} samples right, {gets} origin GETs")


def test_iterable_dataset_gives_each_worker_a_share(loaded):
    cluster, prefix, want = loaded
    global _dataset
    _dataset = ShoalIterableDataset(cluster.config_path, prefix=prefix, transform=digest, data="bytes", ahead=16)
    with cluster.through_nodes(least=sum(SIZES.values())):
        with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
            shares = pool.map(_iter_share, range(WORKERS))
    seen = [s for share in shares for s, _, _ in share]
    assert sorted(seen) == sorted(want.values())
    assert all(pid == rt for share in shares for _, pid, rt in share)
    assert len({pid for share in shares for _, pid, _ in share}) == WORKERS


def test_keys_datasets_and_bad_arguments(loaded):
    cluster, prefix, want = loaded
    keys = sorted(want)[:5]
    ds = ShoalMapDataset(cluster.config_dict(), keys=[f"shoal://{k}" for k in keys], data="bytes")
    with cluster.through_nodes(least=sum(SIZES[k] for k in keys), client=ds.client):
        assert [digest(*ds[i]) for i in range(5)] == [want[k] for k in keys]
    with pytest.raises(FileNotFoundError):
        ShoalMapDataset(cluster.config_path, keys=[f"{prefix}/missing"])[0]
    with pytest.raises(ValueError, match="prefix or a list of keys"):
        ShoalMapDataset(cluster.config_path)
    with pytest.raises(ValueError, match="BUCKET/KEY"):
        ShoalMapDataset(cluster.config_path, keys=["just-a-bucket"])
    with pytest.raises(ValueError, match="rank"):
        ShoalIterableDataset(cluster.config_path, keys=keys, rank=2, world=2)
    with pytest.raises(ValueError, match="together"):
        ShoalIterableDataset(cluster.config_path, keys=keys, rank=1)
    with pytest.raises(ValueError, match="'reader' or 'bytes'"):
        ShoalMapDataset(cluster.config_path, keys=keys, data="text")
    with pytest.raises(ValueError, match="expand"):
        ShoalIterableDataset(cluster.config_path, keys=keys, expand=True)
    with pytest.raises(TypeError, match="list"):
        ShoalMapDataset(cluster.config_path, keys=keys[0])


def test_a_fork_stops_the_parents_runtime_and_both_sides_read_on(loaded):
    # The runtime's threads stop before the fork (none may be mid-way in
    # anything the child inherits); the parent builds a new one for its next
    # read, and a stream open across the fork says so rather than end short.
    cluster, prefix, want = loaded
    keys = sorted(want)[:8]
    ds = ShoalMapDataset(cluster.config_dict(), keys=[f"shoal://{k}" for k in keys], transform=digest, data="bytes")
    assert ds[0] == want[keys[0]]
    bucket, key = keys[1].split("/", 1)
    stream = ds.client.stream(bucket, key)
    global _dataset
    _dataset = ds
    for _ in range(3):
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map(_map_batch, [[i] for i in range(len(keys))])
        assert [g[0][1] for g in got] == [want[k] for k in keys]
        assert all(pid == rt for g in got for _, _, pid, rt in g)
        assert [ds[i] for i in range(len(keys))] == [want[k] for k in keys]
        assert ds.client.runtime_pid() == os.getpid()
    with pytest.raises(OSError, match="forked"):
        b"".join(stream)


def test_with_every_node_gone_reads_come_from_the_origin(loaded):
    # Last in this module: it stops the module's cluster's nodes.
    cluster, prefix, want = loaded
    for i in range(len(cluster.nodes)):
        if cluster.procs[f"node{i}"].poll() is None:
            cluster.kill_node(i)
    keys = sorted(want)[100:140]
    ds = ShoalMapDataset(cluster.config_path, keys=keys, transform=digest, data="bytes")
    assert [ds[i] for i in range(len(ds))] == [want[k] for k in keys]
    fallbacks = [
        line for line in ds.client.metrics().splitlines() if line.startswith("shoal_client_fallbacks_total")
    ]
    assert sum(float(line.split()[-1]) for line in fallbacks) >= len(keys), fallbacks
