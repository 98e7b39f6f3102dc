"""bench/python.sh's training-shaped readers: one epoch of a DataLoader with
WORKERS workers (torch's when torch is installed, else the tests' stand-in,
python/tests/torchstub) over small objects in batches, or over tar shards
streamed, read by shoal:// (by keys or by prefix), s3fs against the origin or
boto3 against the origin. Prints one line: samples, seconds, CPU seconds of
this process and its workers, origin requests, and for shards the workers'
RSS before their first read and at its peak (MiB) and how far into its first
shard each worker's first sample came (bytes).

    training.py READER SHAPE <ARGS_JSON

READER: shoal-keys, shoal-prefix, s3fs, boto3, or shoal-single (one process,
one batch read with __getitems__ against the same batch read one by one).
SHAPE: small or shards.
"""

import json
import os
import resource
import sys
import tarfile
import time
import urllib.request

import torch.utils.data as tud


def cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def origin_requests(origin):
    with urllib.request.urlopen(f"http://{origin}/_origin/stats") as r:
        return sum(x["count"] for x in json.load(r)["requests"])


def rss_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def worker_id():
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return info.id if info else 0


class Plain:
    """A map or iterable dataset of s3fs's or boto3's, as users write them:
    a client made in each worker, one object per __getitem__."""

    def __init__(self, reader, a):
        self.reader, self.a, self._c = reader, a, None

    def client(self):
        if self._c is None:
            if self.reader == "s3fs":
                import s3fs

                self._c = s3fs.S3FileSystem(
                    key=self.a["origin_key"], secret=self.a["origin_secret"],
                    endpoint_url=f"http://{self.a['origin']}",
                    client_kwargs={"region_name": "us-east-1"}, skip_instance_cache=True,
                )
            else:
                import boto3
                from botocore.config import Config

                self._c = boto3.client(
                    "s3", endpoint_url=f"http://{self.a['origin']}",
                    aws_access_key_id=self.a["origin_key"], aws_secret_access_key=self.a["origin_secret"],
                    region_name="us-east-1", config=Config(s3={"addressing_style": "path"}),
                )
        return self._c

    def __getstate__(self):
        return {"reader": self.reader, "a": self.a, "_c": None}

    def open(self, key):
        if self.reader == "s3fs":
            return self.client().open(f"bench/{key}", "rb", block_size=8 << 20)
        return self.client().get_object(Bucket="bench", Key=key)["Body"]

    def __len__(self):
        return len(self.a["keys"])

    def __getitem__(self, i):
        with self.open(self.a["keys"][i]) as f:
            return len(f.read())

    def __iter__(self):
        w = worker_id()
        for key in self.a["keys"][w :: self.a["workers"]]:
            with self.open(key) as f:
                yield from shard_samples(key, f)


_first = {}


def shard_samples(key, f, raw=None):
    """A shard's members, noting per worker the RSS before its first read,
    and how far into the shard the first sample came."""
    _first.setdefault("rss", rss_mib("VmRSS"))
    with tarfile.open(fileobj=f, mode="r|") as tar:
        for member in tar:
            data = tar.extractfile(member).read()
            if "at" not in _first:
                _first["at"] = raw.tell() if raw is not None else member.offset_data + len(data)
            yield len(data)
    _first["peak"] = rss_mib("VmHWM")


def main():
    reader, shape, a = sys.argv[1], sys.argv[2], json.load(sys.stdin)
    if reader == "shoal-single":
        return single(a)
    t0, c0, o0 = time.monotonic(), cpu_seconds(), origin_requests(a["origin"])
    if reader.startswith("shoal"):
        from shoal.datasets import ShoalIterableDataset, ShoalMapDataset

        source = {"keys": [f"bench/{k}" for k in a["keys"]]} if reader == "shoal-keys" else {"prefix": a["prefix"]}
        if shape == "small":
            ds = ShoalMapDataset(a["config"], data="bytes", transform=lambda k, b: len(b), **source)
        else:
            ds = Reported(ShoalIterableDataset(a["config"], transform=Shards(), expand=True, **source))
    else:
        ds = Plain(reader, a)
        if shape == "shards":
            ds = Reported(ds)
    kw = {"collate_fn": list} if hasattr(tud, "default_collate") else {}
    loader = tud.DataLoader(ds, batch_size=a["batch"], num_workers=a["workers"], **kw)
    n, extra = 0, []
    for batch in loader:
        batch = batch[2] if isinstance(batch, tuple) else batch
        for s in batch:
            if isinstance(s, dict):
                extra.append(s)
            else:
                n += 1
    t = time.monotonic() - t0
    rss = [f"{e['rss']:.0f}/{e['peak']:.0f}" for e in extra]
    at = [str(e["at"]) for e in extra]
    print(n, f"{t:.3f}", f"{cpu_seconds() - c0:.3f}", origin_requests(a["origin"]) - o0,
          ",".join(rss) or "-", ",".join(at) or "-")


class Shards:
    """shoal's transform for a shard: its members as samples, then (after
    the worker's last shard) what the worker saw."""

    def __call__(self, key, reader):
        yield from shard_samples(key, reader, reader.raw)


class Reported(tud.IterableDataset):
    """An iterable dataset whose workers each say, after their last sample,
    what ``shard_samples`` saw."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        yield from self.inner
        if _first:
            yield dict(_first)


def single(a):
    """Warm batches of 64 (the nodes hold them; this process has read none of
    them, so none is in its own RAM tier): each round reads one batch one by
    one and the next with __getitems__; samples/s of each, best of the rounds."""
    from shoal.datasets import ShoalMapDataset

    ds = ShoalMapDataset(a["config"], prefix=a["prefix"], data="bytes")
    one, many = [], []
    for r in range(len(ds) // 128):
        first = list(range(r * 128, r * 128 + 64))
        then = list(range(r * 128 + 64, r * 128 + 128))
        t0 = time.monotonic()
        for i in first:
            ds[i]
        one.append(time.monotonic() - t0)
        t0 = time.monotonic()
        ds.__getitems__(then)
        many.append(time.monotonic() - t0)
    print(f"{64 / min(one):.0f} {64 / min(many):.0f}")


if __name__ == "__main__":
    main()
