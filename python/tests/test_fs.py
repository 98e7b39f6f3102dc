"""``shoal://`` over real nodes: reads, listings, copies, and what fails how."""

import errno
import hashlib
import os
import random
import threading
import time
import urllib.request

import fsspec
import pytest

from cluster import sample
from conftest import put
from shoal import Client
from shoal.datasets import open_stream
from shoal.fs import ShoalFileSystem

MiB = 1 << 20


def data(n, seed=0):
    return random.Random(seed).randbytes(n)


def test_reads_whole_ranges_and_seeks_match_the_object(cluster, fs, s3, base):
    body = data(3 * MiB + 12345)
    put(s3, f"{base}/obj.bin", body)
    path = f"shoal://{base}/obj.bin"
    with cluster.through_nodes(least=len(body), client=fs.client):
        assert fs.cat_file(path) == body
    assert fs.cat_file(path, start=MiB - 10, end=MiB + 10) == body[MiB - 10 : MiB + 10]
    assert fs.cat_file(path, start=-100) == body[-100:]
    assert fs.cat_file(path, start=10, end=-10) == body[10:-10]
    assert fs.cat_file(path, start=len(body) + 5) == b""
    with fs.open(path) as f:
        assert f.size == len(body)
        rng = random.Random(1)
        for _ in range(50):
            at, n = rng.randrange(len(body)), rng.randrange(1, 300_000)
            f.seek(at)
            assert f.read(n) == body[at : at + n]
        f.seek(0)
        got = b"".join(iter(lambda: f.read(64 << 10), b""))
        assert got == body
    with fsspec.open(path, "rb", config=fs.storage_options["config"]) as f:
        assert f.read() == body


def test_readinto_fills_a_callers_buffer(cluster, fs, s3, base):
    import numpy as np

    body = data(2 * MiB + 100, 12)
    put(s3, f"{base}/into", body)
    with cluster.through_nodes(least=len(body), client=fs.client), fs.open(f"{base}/into") as f:
        f.seek(5)
        buf = bytearray(MiB)
        assert f.readinto(buf) == MiB and bytes(buf) == body[5 : MiB + 5]
        arr = np.zeros(MiB // 8 + 100, dtype=np.float64)
        assert f.readinto(arr) == len(body) - MiB - 5
        assert arr.tobytes()[: len(body) - MiB - 5] == body[MiB + 5 :]
        assert f.readinto(bytearray(MiB)) == 0
        with pytest.raises(ValueError, match="writable"):
            f._reader.readinto(0, memoryview(bytes(10)))


def test_a_sequential_read_fetches_ahead_and_a_random_one_only_its_bytes(cluster, s3, base):
    body = data(12 * MiB, seed=2)
    put(s3, f"{base}/seq.bin", body)
    put(s3, f"{base}/rand.bin", body)
    fs = ShoalFileSystem(config=cluster.config_path, skip_instance_cache=True)
    with cluster.through_nodes(least=len(body), client=fs.client), fs.open(f"{base}/seq.bin") as f:
        assert b"".join(iter(lambda: f.read(256 << 10), b"")) == body
    m = fs.client.metrics()
    prefetched = [line for line in m.splitlines() if line.startswith("shoal_client_prefetched")]
    assert prefetched and float(prefetched[0].split()[-1]) > 0, prefetched
    # Small reads far apart: each asks its node for a small range (the read
    # and the file's 128 KiB read-ahead), not for whole blocks.
    sent = fetched(fs)
    with cluster.through_nodes(least=3 * 4096, client=fs.client), fs.open(f"{base}/rand.bin") as f:
        for at in (9 * MiB + 5, 3 * MiB + 7, 6 * MiB + 11):
            f.seek(at)
            assert f.read(4096) == body[at : at + 4096]
    got = fetched(fs) - sent
    assert 3 * 4096 <= got <= 3 * (4096 + (128 << 10)), f"3 reads of 4 KiB fetched {got} bytes"


def fetched(fs):
    """Bytes the client took from nodes and the origin."""
    return sum(
        float(line.split()[-1])
        for line in fs.client.metrics().splitlines()
        if line.startswith("shoal_client_bytes_total") and 'source="ram"' not in line
    )


def test_cat_ranges_reads_many_ranges_at_once_and_returns_failures(cluster, fs, s3, base):
    a, b = data(2 * MiB, 3), data(100_000, 4)
    put(s3, f"{base}/a", a)
    put(s3, f"{base}/b", b)
    paths = [f"{base}/a", f"{base}/b", f"{base}/a", f"{base}/missing"]
    starts = [0, 10, MiB + 1, 0]
    ends = [100, 20_000, 2 * MiB, 10]
    with cluster.through_nodes(least=100 + 19_990 + MiB - 1, client=fs.client):
        out = fs.cat_ranges(paths, starts, ends)
    assert out[0] == a[:100]
    assert out[1] == b[10:20_000]
    assert out[2] == a[MiB + 1 :]
    assert isinstance(out[3], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges(paths, starts, ends, on_error="raise")
    with pytest.raises(ValueError):
        fs.cat_ranges(paths, starts[:2], ends)


def listings(fs, source):
    """Listing pages the client had from ``source`` (node, origin)."""
    return sample(fs.client.metrics(), f'shoal_client_metadata_requests_total{{op="list",source="{source}"}}')


def test_listings_info_find_and_glob_go_through_the_nodes(fs, s3, base):
    for k in ["x/1.txt", "x/2.txt", "x/y/3.txt", "z.txt"]:
        put(s3, f"{base}/{k}", k.encode())
    from_nodes, from_origin = listings(fs, "node"), listings(fs, "origin")
    assert fs.ls(base, detail=False) == [f"{base}/x", f"{base}/z.txt"]
    listed = {i["name"]: i for i in fs.ls(f"{base}/x")}
    assert listed[f"{base}/x/y"]["type"] == "directory"
    assert listed[f"{base}/x/1.txt"]["size"] == len(b"x/1.txt")
    assert fs.info(f"{base}/x")["type"] == "directory"
    info = fs.info(f"{base}/z.txt")
    assert info["type"] == "file" and info["size"] == 5 and info["ETag"]
    assert fs.ls(f"{base}/z.txt", detail=False) == [f"{base}/z.txt"]
    assert fs.find(base) == [f"{base}/x/1.txt", f"{base}/x/2.txt", f"{base}/x/y/3.txt", f"{base}/z.txt"]
    assert f"{base}/x/y" in fs.find(base, withdirs=True)
    assert fs.glob(f"{base}/x/*.txt") == [f"{base}/x/1.txt", f"{base}/x/2.txt"]
    assert fs.glob(f"{base}/**/3.txt") == [f"{base}/x/y/3.txt"]
    assert fs.isdir(f"{base}/x") and fs.isfile(f"{base}/x/1.txt")
    assert not fs.exists(f"{base}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{base}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{base}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.ls("no-such-bucket-here")
    # Pages came from the nodes, none from the origin instead.
    assert listings(fs, "node") > from_nodes
    assert listings(fs, "origin") == from_origin


def test_get_copies_a_tree(cluster, fs, s3, base, tmp_path):
    files = {"d/a.bin": data(MiB + 3, 5), "d/e/b.bin": data(10, 6)}
    for k, v in files.items():
        put(s3, f"{base}/{k}", v)
    with cluster.through_nodes(least=MiB + 13, client=fs.client):
        fs.get(f"{base}/d", str(tmp_path / "out"), recursive=True)
    assert (tmp_path / "out" / "a.bin").read_bytes() == files["d/a.bin"]
    assert (tmp_path / "out" / "e" / "b.bin").read_bytes() == files["d/e/b.bin"]


def test_missing_objects_and_buckets_are_file_not_found(fs, base):
    for call in (
        lambda: fs.cat_file(f"{base}/nope"),
        lambda: fs.open(f"{base}/nope"),
        lambda: fs.cat_file("no-such-bucket-xyz/k"),
        lambda: fs.get_file(f"{base}/nope", "/tmp/shoal-never-written"),
    ):
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert e.value.errno == errno.ENOENT
    assert not os.path.exists("/tmp/shoal-never-written")


def test_writes_are_refused_clearly(fs, base):
    for call in (
        lambda: fs.open(f"{base}/w", "wb"),
        lambda: fs.pipe(f"{base}/w", b"x"),
        lambda: fs.rm(f"{base}/w"),
        lambda: fs.mkdir(f"{base}/d"),
        lambda: fs.touch(f"{base}/t"),
        lambda: fs.put(__file__, f"{base}/p"),
        lambda: fs.mv(f"{base}/a", f"{base}/b"),
    ):
        with pytest.raises(PermissionError) as e:
            call()
        assert e.value.errno == errno.EROFS
        assert "read-only" in str(e.value)


def test_bad_configs_and_paths_are_clear_errors(cluster, tmp_path):
    with pytest.raises(FileNotFoundError, match="/nonexistent/shoal.toml"):
        ShoalFileSystem(config="/nonexistent/shoal.toml", skip_instance_cache=True)
    bad = tmp_path / "bad.toml"
    bad.write_text(cluster.client_toml() + "\n[cluster.extra]\nnope = 1\n")
    with pytest.raises(ValueError, match="cluster"):
        Client(str(bad))
    no_origin = tmp_path / "no-origin.toml"
    no_origin.write_text('[cache]\nram_size = "1MiB"\n')
    with pytest.raises(ValueError, match=r"\[origin\]"):
        Client(str(no_origin))
    with pytest.raises(ValueError, match="block_size"):
        Client({**cluster.config_dict(), "cluster": {**cluster.config_dict()["cluster"], "block_size": "3KiB"}})
    with pytest.raises(ValueError, match="TOML cannot hold"):
        Client({"origin": {"endpoint": object()}})
    with pytest.raises(ValueError, match="needs the storage option config"):
        ShoalFileSystem(skip_instance_cache=True)
    fs = ShoalFileSystem(config=cluster.config_dict(), skip_instance_cache=True)
    with pytest.raises(ValueError, match="key is missing"):
        fs.cat_file("shoal-py")
    with pytest.raises(ValueError, match="within a bucket"):
        fs.ls("")


def test_a_dict_config_reads_as_the_file_does(cluster, s3, base):
    put(s3, f"{base}/d", b"dict")
    fs = fsspec.filesystem("shoal", config=cluster.config_dict(), skip_instance_cache=True)
    with cluster.through_nodes(least=4, client=fs.client):
        assert fs.cat_file(f"shoal://{base}/d") == b"dict"


def test_an_open_file_reads_its_version_or_fails_with_estale(cluster, fs, s3, base):
    old, new = data(3 * MiB, 7), data(3 * MiB, 8)
    path = f"{base}/changing"
    put(s3, path, old)
    with fs.open(path, block_size=4096) as f:
        assert f.read(100) == old[:100]
        put(s3, path, new)
        f.seek(2 * MiB + 5)
        with pytest.raises(OSError) as e:
            f.read(100)
        assert e.value.errno == errno.ESTALE
        assert "changed" in str(e.value)
        # Bytes already held are of the old version, never the new one: the
        # file's buffer and the reader's RAM tier answer with them, or the
        # reader refuses.
        f.seek(10)
        assert f.read(50) == old[10:60]
        try:
            assert f._reader.read(10, 60) == old[10:60]
        except OSError as e:
            assert e.errno == errno.ESTALE
    # A new open reads the new version, from the nodes.
    with cluster.through_nodes(least=len(new), client=fs.client):
        with fs.open(path) as f:
            assert f.read() == new
        assert fs.cat_file(path) == new


def test_the_gil_is_released_while_bytes_are_awaited(cluster, fs, s3, base):
    put(s3, f"{base}/slow", data(2 * MiB, 9))
    set_delay(cluster, 300)
    try:
        ticks, stop = [0], threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1

        t = threading.Thread(target=spin)
        t.start()
        t0 = time.monotonic()
        with cluster.through_nodes(least=2 * MiB, client=fs.client):
            fs.cat_file(f"{base}/slow")
        took = time.monotonic() - t0
        stop.set()
        t.join()
    finally:
        set_delay(cluster, 0)
    assert took > 0.25
    # A Python thread ran all along: hundreds of thousands of steps, not the
    # few a switch interval (5 ms) would give a thread waiting on a held GIL.
    assert ticks[0] > 100_000, ticks[0]


def set_delay(cluster, ms):
    req = urllib.request.Request(
        f"http://{cluster.origin}/_origin/faults",
        data=f'{{"first_byte_delay_ms":{ms}}}'.encode(),
        method="PUT",
    )
    urllib.request.urlopen(req).read()


def test_a_stream_gives_an_object_in_order(cluster, s3, base):
    body = data(5 * MiB + 1, 10)
    put(s3, f"{base}/s", body)
    with cluster.through_nodes(least=len(body)):
        s = open_stream(cluster.config_path, f"shoal://{base}/s")
        assert s.size == len(body)
        assert s.read(10) == body[:10]
        assert b"".join(s.chunks()) == body[10:]
    h = hashlib.sha256()
    client = Client(cluster.config_path)
    with cluster.through_nodes(least=len(body), client=client):
        for chunk in client.stream("shoal-py", f"{base.split('/', 1)[1]}/s"):
            h.update(chunk)
    assert h.digest() == hashlib.sha256(body).digest()


_open_file = None


def _read_open_file(args):
    at, n = args
    _open_file.seek(at)
    return _open_file.read(n), os.getpid(), _open_file.fs.client.runtime_pid()


def test_an_open_file_and_its_client_work_in_a_forked_child(cluster, fs, s3, base):
    import multiprocessing

    body = data(3 * MiB, 11)
    put(s3, f"{base}/forked", body)
    # The children's reads too: theirs are blocks the parent has not read.
    with cluster.through_nodes(least=1000 + 5000 + 70_000, client=fs.client), fs.open(f"{base}/forked") as f:
        assert f.read(1000) == body[:1000]
        parent_runtime = fs.client.runtime_pid()
        assert parent_runtime == os.getpid()
        ctx = multiprocessing.get_context("fork")
        global _open_file
        _open_file = f
        with ctx.Pool(2) as pool:
            got = pool.map(_read_open_file, [(2 * MiB, 5000), (MiB + 3, 70_000)])
        for (b, pid, runtime), (at, n) in zip(got, [(2 * MiB, 5000), (MiB + 3, 70_000)]):
            assert b == body[at : at + n]
            assert runtime == pid != os.getpid()
        # The parent's own runtime is untouched by the children's.
        assert fs.client.runtime_pid() == parent_runtime
        f.seek(MiB)
        assert f.read(10) == body[MiB : MiB + 10]


def test_threads_read_at_once_through_one_client(cluster, s3, base):
    from concurrent.futures import ThreadPoolExecutor

    bodies = {f"{base}/th{i}": data(300_000 + i, 20 + i) for i in range(16)}
    for k, v in bodies.items():
        put(s3, k, v)
    # Every call releases the GIL while it waits: the reads overlap.
    fs = ShoalFileSystem(config=cluster.config_path, skip_instance_cache=True)
    with cluster.through_nodes(least=sum(map(len, bodies.values())), client=fs.client):
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda k: fs.cat_file(k), bodies))
    assert got == list(bodies.values())
    assert fs.client.runtime_pid() == os.getpid()
