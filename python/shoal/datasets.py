"""PyTorch datasets over a shoal cluster, without a mount.

``ShoalMapDataset`` (indexable) and ``ShoalIterableDataset`` read the objects
under a prefix, or a list of ``BUCKET/KEY`` paths (``shoal://``, ``s3://`` or
bare), each at the version known when the dataset was made (``_objects``).

A sample is ``transform(key, reader)``: the object's key and an
``ObjectReader``, a file that streams, seeks and reads ranges
(``read_range``) without fetching the rest of the object. With
``data="bytes"`` it is ``transform(key, data)``, the object's bytes, read
whole. Without a transform the sample is ``(key, reader)`` or
``(key, data)``.

The map dataset's ``__getitems__`` (what a DataLoader asks a batch with)
reads the batch's objects at once. The iterable one hands over objects in
order as they arrive, with at most ``ahead`` objects and ``ahead_bytes``
bytes read ahead of its consumer; with ``expand=True`` each object's
transform returns an iterable of samples (a tar shard's members, say),
yielded as the transform reads them.

Ranks and world come from ``torch.distributed`` when a process group is
initialized, else from ``rank=``/``world=``, else 0 of 1 (``_ranks``). A
DataLoader's workers, forked, spawned or started by a forkserver, each build
their own runtime and connections at their first read. torch is imported only
if installed: the classes are torch's ``Dataset`` and ``IterableDataset``
then, plain classes otherwise.
"""

import io

from . import _paths
from ._objects import ObjectReader, Objects, strip
from ._ranks import Ranks
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

_DATA = ("reader", "bytes")


class _Samples:
    """What both datasets share: the objects, and how each becomes a sample."""

    def __init__(self, config, prefix, keys, transform, data):
        if data not in _DATA:
            raise ValueError(f"data is 'reader' or 'bytes', not {data!r}")
        self.data = data
        self.transform = transform
        self._objects = Objects(config, prefix=prefix, keys=keys)

    @property
    def client(self):
        return self._objects.client

    @property
    def objects(self):
        return self._objects.objects

    def path(self, i):
        """``BUCKET/KEY`` of object ``i``."""
        return self._objects.path(i)

    def _sample(self, i, got=None):
        key = self._objects.key(i)
        if got is None:
            got = self._objects.bytes(i) if self.data == "bytes" else self._objects.reader(i)
        if self.transform is None:
            return key, got
        return self.transform(key, got)


class ShoalMapDataset(_Samples, _MapBase):
    """Sample ``i``: object ``i`` (sorted by key under a prefix, in the order
    given for keys). A DataLoader's sampler shares the indexes out among
    ranks, so ``len`` is every object's count."""

    def __init__(self, config, prefix=None, keys=None, transform=None, data="reader"):
        _Samples.__init__(self, config, prefix, keys, transform, data)

    def __len__(self):
        return len(self._objects)

    def __getitem__(self, i):
        return self._sample(i)

    def __getitems__(self, indexes):
        """A batch's samples, its objects read at once: whole, as bytes; as
        readers, each object's first block fetched for all of them before
        the first transform runs."""
        indexes = list(indexes)
        if self.data == "bytes":
            got = self._objects.many_bytes(indexes)
            return [self._sample(i, g) for i, g in zip(indexes, got)]
        self._objects.prefetch(indexes)
        return [self._sample(i) for i in indexes]


class ShoalIterableDataset(_Samples, _IterBase):
    """Every object once per pass. Each rank takes every ``world``-th object,
    and each of its DataLoader workers every ``num_workers``-th of those;
    ``len`` is the rank's count of objects (with ``expand``, samples per
    object are not known: it has none)."""

    def __init__(
        self,
        config,
        prefix=None,
        keys=None,
        transform=None,
        data="reader",
        ahead=16,
        ahead_bytes=64 << 20,
        expand=False,
        rank=None,
        world=None,
    ):
        _Samples.__init__(self, config, prefix, keys, transform, data)
        if ahead < 1 or ahead_bytes < 1:
            raise ValueError("ahead and ahead_bytes are at least 1")
        if expand and transform is None:
            raise ValueError("expand=True needs a transform that returns an object's samples")
        self.ahead, self.ahead_bytes, self.expand = ahead, ahead_bytes, expand
        self.ranks = Ranks(rank, world)
        # (worker, workers) set by hand, else torch's.
        self.worker = None

    def shard(self):
        """The indexes of the objects this worker of this rank reads."""
        return self.ranks.share(len(self._objects), self.worker)

    def __len__(self):
        if self.expand:
            raise TypeError("samples per object are not known with expand=True")
        return len(self.ranks.share(len(self._objects), worker_of=False))

    def __iter__(self):
        mine = list(self.shard())
        if self.data == "bytes":
            arrived = self._objects.ahead(mine, self.ahead, self.ahead_bytes)
            samples = (self._sample(i, data) for i, data in arrived)
        else:
            samples = self._readers(mine)
        for s in samples:
            if self.expand:
                yield from s
            else:
                yield s

    def _readers(self, mine):
        # The first block of the next ``ahead`` objects is on its way while
        # the transform reads this one.
        fetched = 0
        for n, i in enumerate(mine):
            want = min(len(mine), n + 1 + self.ahead)
            if want > fetched:
                self._objects.prefetch(mine[fetched:want])
                fetched = want
            yield self._sample(i)


def bytes_of(transform):
    """A ``transform(key, data)`` made to take a reader: for a dataset of
    readers whose transform wants each object's bytes."""

    def read_whole(key, reader):
        with reader:
            return transform(key, reader.read())

    return read_whole


def tar_samples(key, reader):
    """The members of a tar shard as ``(name, bytes)`` samples, read as the
    shard streams (``tarfile``'s stream mode): the shard is never held whole.
    For ``expand=True``."""
    import tarfile

    with reader, tarfile.open(fileobj=reader, mode="r|*") as tar:
        for member in tar:
            if member.isfile():
                yield member.name, tar.extractfile(member).read()


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
    """``BUCKET/KEY`` (or a ``shoal://``/``s3://`` URL) as an ``ObjectStream``."""
    client = config_or_client if isinstance(config_or_client, Client) else Client(config_or_client)
    bucket, key = _paths.split(strip(path))
    return ObjectStream(client.stream(bucket, key))
