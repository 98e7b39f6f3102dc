"""The objects a dataset reads, each at a version known when the dataset was
made, and the ways it reads them: whole, as bytes, or as a file-like reader.

Under a prefix the versions come with the listing. A list of keys gets its
versions the way a mount gets a file's: HEADs routed to each object's owner
node, which answers from what it knows (asking the origin once, however many
readers ask), 64 in flight at a time. An object then costs no request beyond
its bytes, in any epoch: a read names the version (``If-Match``), which a node
that holds it answers without asking the origin. An object that changed since
is read at its new version.
"""

import errno
import io

from . import _paths
from ._shoal import Client, ahead, prefetch, versions

# What a reader buffers past each read, as a file of ``shoal://`` does.
READ_AHEAD = 128 << 10


def strip(path):
    """``BUCKET/KEY`` of a ``shoal://``, ``s3://`` or ``s3a://`` URL (or of a
    bare path): one bucket and key whichever scheme names them."""
    for scheme in ("shoal://", "s3://", "s3a://"):
        if path.startswith(scheme):
            return path[len(scheme):]
    return path.lstrip("/")


class ObjectReader(io.BufferedReader):
    """One object version as a file: it streams (reads that follow one
    another are fetched ahead), seeks, and ``read_range`` fetches just the
    bytes asked for. Nothing is fetched before it is read."""

    def __init__(self, reader, bucket, key):
        super().__init__(_Raw(reader), buffer_size=READ_AHEAD)
        self.bucket, self.key = bucket, key
        self.size, self.etag = reader.size, reader.etag
        self._reader = reader

    @property
    def name(self):
        return f"{self.bucket}/{self.key}"

    def read_range(self, start, end):
        """Bytes ``start..end`` of the object (clamped to it), whatever the
        position."""
        return self._reader.read(start, end)


class _Raw(io.RawIOBase):
    def __init__(self, reader):
        super().__init__()
        self._reader = reader
        self._at = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._at

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._reader.size}[whence]
        if base + offset < 0:
            raise OSError(errno.EINVAL, "seek before the start of the object")
        self._at = base + offset
        return self._at

    def readinto(self, b):
        n = self._reader.readinto(self._at, memoryview(b).cast("B"))
        self._at += n
        return n

    def readall(self):
        out = self._reader.read(self._at, self._reader.size)
        self._at += len(out)
        return out


class Objects:
    """A dataset's objects (``(bucket, key, size, etag)``; size and ETag None
    when the version could not be learned: reading it raises why), read with
    a client of each process's own."""

    def __init__(self, config, prefix=None, keys=None):
        if (prefix is None) == (keys is None):
            raise ValueError("a shoal dataset reads a prefix or a list of keys: give one of them")
        self.config = config
        self._client = None
        if keys is not None:
            if isinstance(keys, str):
                raise TypeError("keys is a list of BUCKET/KEY paths, not one string")
            named = [_paths.split(strip(k)) for k in keys]
            for bucket, key in named:
                if not bucket or not key:
                    raise ValueError(f"not a BUCKET/KEY path: {bucket}/{key}")
            known = versions(self.client, named) if named else []
            self.objects = [
                (b, k, *(v[:2] if not isinstance(v, BaseException) else (None, None)))
                for (b, k), v in zip(named, known)
            ]
        else:
            bucket, key = _paths.split(strip(prefix))
            if not bucket:
                raise ValueError(f"not a BUCKET[/PREFIX] path: {prefix!r}")
            under = f"{key}/" if key else ""
            listed, _ = self.client.list(bucket, under, None)
            self.objects = [
                (bucket, k, size, etag) for k, size, etag, _ in sorted(listed) if not k.endswith("/")
            ]

    @property
    def client(self):
        # One per dataset; it builds a runtime of its own in each process.
        if self._client is None:
            self._client = Client(self.config)
        return self._client

    def __getstate__(self):
        # A worker started by spawn or forkserver builds its own client.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def __len__(self):
        return len(self.objects)

    def path(self, i):
        bucket, key, _, _ = self.objects[i]
        return f"{bucket}/{key}"

    def key(self, i):
        return self.objects[i][1]

    def bytes(self, i):
        bucket, key, size, etag = self.objects[i]
        if etag is not None:
            try:
                return self.client.cat(bucket, key, None, None, size, etag)
            except OSError as e:
                if e.errno != errno.ESTALE:
                    raise
        return self.client.cat(bucket, key)

    def many_bytes(self, indexes):
        """The objects at ``indexes``, read at once: their bytes in order."""
        ranges = []
        for i in indexes:
            bucket, key, size, etag = self.objects[i]
            ranges.append((bucket, key, None, None, size, etag) if etag else (bucket, key, None, None))
        got = self.client.cat_ranges(ranges)
        out = []
        for i, g in zip(indexes, got):
            if isinstance(g, OSError) and g.errno == errno.ESTALE:
                g = self.bytes(i)
            if isinstance(g, BaseException):
                raise g
            out.append(g)
        return out

    def reader(self, i):
        bucket, key, size, etag = self.objects[i]
        return ObjectReader(self.client.open(bucket, key, size, etag), bucket, key)

    def prefetch(self, indexes, blocks=1):
        """Starts fetching the first ``blocks`` blocks of each object, without
        waiting."""
        prefetch(self.client, [self.objects[i] for i in indexes], blocks)

    def ahead(self, indexes, count, max_bytes):
        """``(index, bytes)`` of each object at ``indexes``, in order, read
        ahead: ``count`` in flight, ``max_bytes`` held at most."""
        got = ahead(self.client, [self.objects[i] for i in indexes], count, max_bytes)
        return ((indexes[j], b) for j, b in got)
