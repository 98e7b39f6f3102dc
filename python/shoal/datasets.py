"""PyTorch datasets over a shoal cluster, without a mount.

``ShoalMapDataset`` (indexable) and ``ShoalIterableDataset`` read the objects
under a prefix, or a list of ``BUCKET/KEY`` paths, each sample one object's
bytes (or ``transform`` of them). Objects listed under a prefix are read at the
version listed (no node asks the origin whether it changed); one that changed
since is read at its new version. ``open_stream`` gives one object as a
file-like stream, fetched ahead of its reader.

A DataLoader's workers are forked from the process that made the dataset: each
builds its own runtime and connections at its first read (no socket or thread
is shared across the fork). torch is imported only if installed: the classes
are torch's ``Dataset`` and ``IterableDataset`` then, plain classes otherwise.
"""

import errno
import io

from . import _paths
from ._shoal import Client


def _torch_data():
    try:
        from torch.utils import data
    except ImportError:
        return None
    return data


_data = _torch_data()
_MapBase = _data.Dataset if _data else object
_IterBase = _data.IterableDataset if _data else object


def _strip(path):
    return path[len("shoal://"):] if path.startswith("shoal://") else path.lstrip("/")


class _Objects:
    """The objects of a dataset, and a client to read them with."""

    def __init__(self, config, prefix=None, keys=None, transform=None):
        if (prefix is None) == (keys is None):
            raise ValueError("a shoal dataset reads a prefix or a list of keys: give one of them")
        self.config = config
        self.transform = transform
        self._client = None
        if keys is not None:
            self.objects = [(_paths.split(_strip(k)), None) for k in keys]
            for (bucket, key), _ in self.objects:
                if not bucket or not key:
                    raise ValueError(f"not a BUCKET/KEY path: {bucket}/{key}")
        else:
            bucket, key = _paths.split(_strip(prefix))
            if not bucket:
                raise ValueError(f"not a BUCKET[/PREFIX] path: {prefix!r}")
            under = f"{key}/" if key else ""
            listed, _ = self.client.list(bucket, under, None)
            self.objects = [
                ((bucket, k), (size, etag)) for k, size, etag, _ in sorted(listed) if not k.endswith("/")
            ]

    @property
    def client(self):
        # One per dataset; it builds a runtime of its own in each process.
        if self._client is None:
            self._client = Client(self.config)
        return self._client

    def __getstate__(self):
        # A worker started by spawn builds its own client.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def path(self, i):
        (bucket, key), _ = self.objects[i]
        return f"{bucket}/{key}"

    def _done(self, data):
        return self.transform(data) if self.transform is not None else data

    def read(self, i):
        (bucket, key), known = self.objects[i]
        if known is not None:
            try:
                return self.client.cat(bucket, key, None, None, *known)
            except OSError as e:
                if e.errno != errno.ESTALE:
                    raise
        return self.client.cat(bucket, key)

    def read_many(self, indexes):
        """The objects at ``indexes``, read at once, in order."""
        ranges = []
        for i in indexes:
            (bucket, key), known = self.objects[i]
            ranges.append((bucket, key, None, None, *known) if known else (bucket, key, None, None))
        got = self.client.cat_ranges(ranges)
        for i, g in zip(indexes, got):
            if isinstance(g, OSError) and g.errno == errno.ESTALE:
                g = self.read(i)
            if isinstance(g, BaseException):
                raise g
            yield g


class ShoalMapDataset(_Objects, _MapBase):
    """Sample ``i``: the bytes of the ``i``-th object (sorted by key under a
    prefix, in the order given for keys), through ``transform`` if given."""

    def __init__(self, config, prefix=None, keys=None, transform=None):
        _Objects.__init__(self, config, prefix=prefix, keys=keys, transform=transform)

    def __len__(self):
        return len(self.objects)

    def __getitem__(self, i):
        return self._done(self.read(i))


def _worker():
    """(this worker's id, how many there are) in a DataLoader, else (0, 1)."""
    if _data is not None:
        info = _data.get_worker_info()
        if info is not None:
            return info.id, info.num_workers
    return 0, 1


class ShoalIterableDataset(_Objects, _IterBase):
    """Every object once per pass, each DataLoader worker (and each of
    ``world`` ranks, if given) taking its share; ``prefetch`` objects are read
    at once ahead of the consumer."""

    def __init__(self, config, prefix=None, keys=None, transform=None, prefetch=16, rank=0, world=1):
        _Objects.__init__(self, config, prefix=prefix, keys=keys, transform=transform)
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not one of {world}")
        self.prefetch = max(1, prefetch)
        self.rank, self.world = rank, world
        self.worker = None

    def shard(self):
        worker, workers = self.worker or _worker()
        share, shares = self.rank * workers + worker, self.world * workers
        return range(share, len(self.objects), shares)

    def __iter__(self):
        mine = list(self.shard())
        for at in range(0, len(mine), self.prefetch):
            for data in self.read_many(mine[at : at + self.prefetch]):
                yield self._done(data)

    def __len__(self):
        return len(self.objects)


class ObjectStream(io.RawIOBase):
    """One object version's bytes, read in order, fetched ahead of the reader."""

    def __init__(self, stream):
        super().__init__()
        self._chunks = stream
        self._left = memoryview(b"")
        self.size = stream.size

    def readable(self):
        return True

    def readinto(self, b):
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = memoryview(chunk)
        n = min(len(b), len(self._left))
        b[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def chunks(self):
        """The rest of the object, as the buffers it arrives in."""
        if self._left:
            yield bytes(self._left)
            self._left = memoryview(b"")
        yield from self._chunks


def open_stream(config_or_client, path):
    """``BUCKET/KEY`` as an ``ObjectStream``."""
    client = config_or_client if isinstance(config_or_client, Client) else Client(config_or_client)
    bucket, key = _paths.split(_strip(path))
    return ObjectStream(client.stream(bucket, key))
