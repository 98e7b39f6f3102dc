"""``shoal://`` beside s3fs: the same ``info`` types, ``s3://`` paths, a
filesystem that pickles into another process, URL chaining; listings and
versions that ``refresh`` and ``invalidate_cache`` bring up to date at the
nodes; and the datasets' batch and streaming reads."""

import hashlib
import io
import pickle
import subprocess
import sys
import tarfile
import time
from datetime import datetime

import fsspec
import pytest

from cluster import BUCKET, ORIGIN_KEY, ORIGIN_SECRET
from conftest import put
from shoal.datasets import ShoalIterableDataset, ShoalMapDataset, bytes_of, tar_samples

MiB = 1 << 20


def s3fs_of(cluster):
    import s3fs
    return s3fs.S3FileSystem(
        key=ORIGIN_KEY,
        secret=ORIGIN_SECRET,
        endpoint_url=f"http://{cluster.origin}",
        client_kwargs={"region_name": "us-east-1"},
        skip_instance_cache=True,
    )


def test_info_and_listings_carry_s3fs_types(cluster, fs, s3, base):
    put(s3, f"{base}/d/a.bin", b"x" * 1000)
    ours, theirs = fs.info(f"shoal://{base}/d/a.bin"), s3fs_of(cluster).info(f"s3://{base}/d/a.bin")
    for field in ("ETag", "LastModified", "size", "type", "name"):
        assert type(ours[field]) is type(theirs[field]), field
    assert ours["ETag"] == theirs["ETag"] and ours["ETag"].startswith('"')
    assert ours["LastModified"] == theirs["LastModified"]
    assert ours["LastModified"].utcoffset().total_seconds() == 0
    listed = fs.ls(f"{base}/d", detail=True)[0]
    assert listed["ETag"] == theirs["ETag"] and isinstance(listed["LastModified"], datetime)
    assert fs.modified(f"{base}/d/a.bin") == theirs["LastModified"]
    # s3:// names the same bucket and key.
    assert fs.cat_file(f"s3://{base}/d/a.bin") == b"x" * 1000
    assert fs.info(f"s3://{base}/d/a.bin")["name"] == f"{base}/d/a.bin"
    assert fs.ls(f"s3://{base}/d", detail=False) == [f"{base}/d/a.bin"]


def test_a_pickled_filesystem_reads_in_another_process(fs, s3, base):
    put(s3, f"{base}/p.bin", b"pickled" * 1000)
    code = "import pickle, sys; fs = pickle.loads(sys.stdin.buffer.read()); sys.stdout.buffer.write(fs.cat_file(sys.argv[1]))"
    out = subprocess.run(
        [sys.executable, "-c", code, f"{base}/p.bin"], input=pickle.dumps(fs), capture_output=True
    )
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == b"pickled" * 1000


def test_simplecache_chains_in_front_of_shoal(cluster, s3, base, tmp_path):
    put(s3, f"{base}/c.bin", b"chained" * 500)
    url = f"simplecache::shoal://{base}/c.bin"
    opts = {"shoal": {"config": cluster.config_path}, "simplecache": {"cache_storage": str(tmp_path)}}
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read() == b"chained" * 500
    assert any(p.is_file() for p in tmp_path.iterdir()), "nothing was cached locally"


def test_refresh_sees_a_new_object_at_once_and_without_it_within_the_ttl(cluster, s3, base):
    ttl = 2
    config = cluster.config_dict()
    config["mount"] = {"metadata_ttl": f"{ttl}s"}
    fs = fsspec.filesystem("shoal", config=config, skip_instance_cache=True)
    put(s3, f"{base}/r/a", b"a")
    assert fs.ls(f"{base}/r", detail=False) == [f"{base}/r/a"]
    with pytest.raises(FileNotFoundError):
        fs.info(f"{base}/r/b")
    put(s3, f"{base}/r/b", b"b")
    written = time.monotonic()
    # The nodes keep the listing and the missing mark; a refresh is answered now.
    assert fs.ls(f"{base}/r", detail=False, refresh=True) == [f"{base}/r/a", f"{base}/r/b"]
    assert fs.info(f"{base}/r/b", refresh=True)["size"] == 1
    # invalidate_cache reaches the nodes too: the next ask takes nothing older.
    put(s3, f"{base}/r/c", b"c")
    fs.invalidate_cache(f"{base}/r")
    assert fs.ls(f"{base}/r", detail=False) == [f"{base}/r/a", f"{base}/r/b", f"{base}/r/c"]
    # Without either, a new object shows within metadata_ttl.
    put(s3, f"{base}/r/d", b"d")
    written = time.monotonic()
    while f"{base}/r/d" not in fs.ls(f"{base}/r", detail=False):
        assert time.monotonic() - written < ttl + 1, "not seen within metadata_ttl"
        time.sleep(0.05)


def _tar(members):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return out.getvalue()


def test_a_batch_is_read_at_once_and_samples_have_keys_and_readers(cluster, s3, base):
    bodies = {f"{base}/b/{i:03d}": bytes([i]) * (1000 + i) for i in range(64)}
    for k, v in bodies.items():
        put(s3, k, v)
    keys = sorted(bodies)
    ds = ShoalMapDataset(cluster.config_path, prefix=f"{base}/b")
    key, reader = ds[3]
    assert key == keys[3].split("/", 1)[1] and reader.key == key and reader.bucket == BUCKET
    assert reader.read_range(10, 20) == bodies[keys[3]][10:20]
    reader.seek(-5, io.SEEK_END)
    assert reader.read() == bodies[keys[3]][-5:]
    batch = ds.__getitems__(list(range(64)))
    assert [k for k, _ in batch] == [k.split("/", 1)[1] for k in keys]
    assert [r.read() for _, r in batch] == [bodies[k] for k in keys]
    as_bytes = ShoalMapDataset(cluster.config_path, prefix=f"{base}/b", data="bytes")
    assert as_bytes.__getitems__([5, 1]) == [(keys[5].split("/", 1)[1], bodies[keys[5]]), (keys[1].split("/", 1)[1], bodies[keys[1]])]
    helper = ShoalMapDataset(cluster.config_path, keys=keys[:2], transform=bytes_of(lambda k, b: (k, len(b))))
    assert helper[1] == (keys[1].split("/", 1)[1], len(bodies[keys[1]]))


def test_the_iterable_dataset_streams_in_order_within_its_bounds(cluster, s3, base):
    # Bytes: in order, never more than the bound read ahead.
    bodies = {f"{base}/i/{i:03d}": bytes([i]) * 300_000 for i in range(40)}
    for k, v in bodies.items():
        put(s3, k, v)
    ds = ShoalIterableDataset(cluster.config_path, prefix=f"{base}/i", data="bytes", ahead=8, ahead_bytes=MiB)
    objects = ds._objects
    it = objects.ahead(list(range(40)), 8, MiB)
    got = [(i, hashlib.md5(b).hexdigest()) for i, b in it]
    assert [i for i, _ in got] == list(range(40))
    assert [d for _, d in got] == [hashlib.md5(bodies[k]).hexdigest() for k in sorted(bodies)]
    assert [k for k, _ in ds] == [k.split("/", 1)[1] for k in sorted(bodies)]
    # A tar shard streams: its first member comes long before its end is read.
    members = [(f"m{i:03d}.bin", bytes([i % 256]) * 256_000) for i in range(96)]
    put(s3, f"{base}/shards/s0.tar", _tar(members))
    read_at_first = []

    def samples(key, reader):
        for n, sample in enumerate(tar_samples(key, reader)):
            if n == 0:
                read_at_first.append(reader.raw.tell())
            yield sample

    shards = ShoalIterableDataset(cluster.config_path, prefix=f"{base}/shards", transform=samples, expand=True)
    got = list(shards)
    assert got == members
    size = len(_tar(members))
    assert read_at_first[0] < size // 4, f"{read_at_first[0]} of {size} bytes read before the first sample"
