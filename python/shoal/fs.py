"""``shoal://``: an fsspec filesystem reading a bucket through a shoal cluster.

Paths are ``BUCKET/KEY``. Bytes come through the cache nodes with the mount's
routing, read-ahead, hedging, failover and origin fallback; listings and HEADs
through the nodes' metadata path (``[mount] metadata``, as a mount's). An open
file reads the version it was opened at, or fails with ``OSError(ESTALE)``;
never a mix. The filesystem is read-only: writes raise ``PermissionError``.

The storage option ``config`` is the mount's TOML file (``[origin]``,
``[cluster]``, ``[cache]``, ``[mount]``), or a dict of the same keys::

    fs = fsspec.filesystem("shoal", config="/etc/shoal/mount.toml")
    pd.read_parquet("shoal://bucket/key", storage_options={"config": ...})

``s3://BUCKET/KEY`` (and ``s3a://``) names the same object as
``shoal://BUCKET/KEY`` wherever a path is taken. ``info`` and listings give
``ETag`` (quoted, as S3 sends it) and ``LastModified`` (a UTC datetime) as
s3fs does. The nodes keep listings and versions for the config's
``[mount] metadata_ttl``; ``refresh=True`` (``ls``, ``info``, ``find``) asks
for answers no older than now, and after ``invalidate_cache(path)`` every
ask under or over ``path`` takes no answer older than the invalidation. An
instance pickles (its storage options), so Dask and Ray ship it to workers.
"""

import errno
import os
import time
from datetime import datetime, timezone

from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import isfilelike

from . import _paths
from ._shoal import Client

# What a file reads past each read, as the kernel's read-ahead does in front of
# a mount: sequential small reads reach the reader as runs it fetches ahead of,
# a random one costs this much more than its bytes.
READ_AHEAD = 128 << 10


def _read_only(what):
    return PermissionError(
        errno.EROFS, f"shoal:// is read-only: cannot {what} (write to the bucket itself)"
    )


# How long an invalidation is remembered: past it, no node keeps anything
# older (a node keeps metadata a day at most).
_INVALIDATION_KEPT = 86_400


def _http_etag(etag):
    return f'"{etag}"' if etag is not None and not etag.startswith('"') else etag


def _utc(seconds):
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


class ShoalFileSystem(AbstractFileSystem):
    protocol = "shoal"
    root_marker = ""

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str):
            for scheme in ("s3://", "s3a://"):
                if path.startswith(scheme):
                    path = path[len(scheme):]
        return super()._strip_protocol(path)

    def __init__(self, config=None, **kwargs):
        super().__init__(**kwargs)
        if config is None:
            config = os.environ.get("SHOAL_CONFIG")
        if config is None:
            raise ValueError(
                "shoal:// needs the storage option config: the mount's TOML file "
                "(or a dict of its keys), or SHOAL_CONFIG in the environment"
            )
        self.client = Client(config)
        # Path -> when it was invalidated (time.monotonic()).
        self._invalidated = {}

    # -- metadata ---------------------------------------------------------

    @staticmethod
    def _file(bucket, key, size, etag, mtime):
        return {
            "name": _paths.join(bucket, key),
            "size": size,
            "type": "file",
            "ETag": _http_etag(etag),
            "LastModified": _utc(mtime),
        }

    def invalidate_cache(self, path=None):
        """Asks after this about ``path`` (everything, without one) take no
        answer the nodes kept from before it."""
        now = time.monotonic()
        self._invalidated = {p: t for p, t in self._invalidated.items() if now - t < _INVALIDATION_KEPT}
        self._invalidated[self._strip_protocol(path) if path else ""] = now
        super().invalidate_cache(path)

    def _max_age(self, path, refresh=False):
        """The oldest answer an ask about ``path`` takes: 0 to refresh, the
        time since the latest invalidation above or below it, else None."""
        if refresh:
            return 0.0
        now, since = time.monotonic(), None
        for p, t in self._invalidated.items():
            related = not p or path == p or path.startswith(p + "/") or p.startswith(path + "/") or not path
            if related and now - t < _INVALIDATION_KEPT:
                since = min(since, now - t) if since is not None else now - t
        return since

    @staticmethod
    def _dir(name):
        return {"name": name, "size": 0, "type": "directory"}

    def _listing(self, path, delimiter="/", refresh=False):
        path = self._strip_protocol(path)
        bucket, key = _paths.split(path)
        if not bucket:
            raise ValueError("shoal:// lists within a bucket: give shoal://BUCKET[/PREFIX]")
        prefix = f"{key}/" if key else ""
        max_age = self._max_age(path, refresh)
        objects, prefixes = self.client.list(bucket, prefix, delimiter, None, max_age)
        return bucket, key, objects, prefixes

    def ls(self, path, detail=True, refresh=False, **kwargs):
        path = self._strip_protocol(path)
        bucket, key, objects, prefixes = self._listing(path, refresh=refresh)
        out = [self._dir(_paths.join(bucket, p.rstrip("/"))) for p in prefixes]
        # A key ending in "/" is a directory's marker object, not a file.
        out += [
            self._file(bucket, k, s, e, m)
            for k, s, e, m in objects
            if not k.endswith("/")
        ]
        if not out and not any(k.endswith("/") for k, *_ in objects):
            if not key:
                return []
            info = self.info(path, refresh=refresh)
            if info["type"] != "file":
                return []
            out = [info]
        out.sort(key=lambda i: i["name"])
        return out if detail else [i["name"] for i in out]

    def info(self, path, refresh=False, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = _paths.split(path)
        max_age = self._max_age(path, refresh)
        if not bucket:
            return self._dir("")
        if not key:
            # A missing bucket fails the listing with FileNotFoundError.
            self.client.list(bucket, "", "/", 1, max_age)
            return self._dir(bucket)
        try:
            h = self.client.head(bucket, key, max_age)
        except FileNotFoundError:
            objects, prefixes = self.client.list(bucket, key + "/", "/", 1, max_age)
            if objects or prefixes:
                return self._dir(path)
            raise FileNotFoundError(errno.ENOENT, "no such object or prefix", path) from None
        return self._file(bucket, key, h["size"], h["etag"], h["last_modified"])

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = _paths.split(path)
        if maxdepth is not None or not bucket:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        # One flat listing of the prefix, not a listing per directory.
        _, _, objects, _ = self._listing(path, delimiter=None, refresh=kwargs.get("refresh", False))
        out = {}
        for k, s, e, m in objects:
            name = _paths.join(bucket, k.rstrip("/"))
            if not k.endswith("/"):
                out[name] = self._file(bucket, k, s, e, m)
            if withdirs:
                for d in _paths.parents(name, path):
                    out.setdefault(d, self._dir(d))
                if k.endswith("/") and name != path:
                    out.setdefault(name, self._dir(name))
        if withdirs and objects and key:
            out[path] = self._dir(path)
        if not out and key:
            try:
                info = self.info(path, refresh=kwargs.get("refresh", False))
            except FileNotFoundError:
                info = None
            if info is not None and info["type"] == "file":
                out[path] = info
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def modified(self, path):
        mtime = self.info(path).get("LastModified")
        if mtime is None:
            raise FileNotFoundError(errno.ENOENT, "no modification time", path)
        return mtime

    def ukey(self, path):
        return self.info(path)["ETag"]

    # -- bytes ------------------------------------------------------------

    def _open(self, path, mode="rb", block_size=None, cache_type="readahead", cache_options=None, **kwargs):
        if mode != "rb":
            raise _read_only(f"open {path!r} with mode {mode!r}")
        bucket, key = _paths.split(self._strip_protocol(path))
        reader = self.client.open(bucket, key)
        return ShoalFile(
            self,
            path,
            reader,
            block_size=READ_AHEAD if block_size in (None, "default") else block_size,
            cache_type=cache_type,
            cache_options=cache_options,
        )

    def cat_file(self, path, start=None, end=None, **kwargs):
        bucket, key = _paths.split(self._strip_protocol(path))
        return self.client.cat(bucket, key, start, end)

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        if max_gap is not None:
            raise NotImplementedError("max_gap: each range is asked for as it is")
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        if not isinstance(starts, list):
            starts = [starts] * len(paths)
        if not isinstance(ends, list):
            ends = [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends must be as long as each other")
        ranges = [
            (*_paths.split(self._strip_protocol(p)), s, e) for p, s, e in zip(paths, starts, ends)
        ]
        out = self.client.cat_ranges(ranges)
        if on_error != "return":
            for r in out:
                if isinstance(r, BaseException):
                    raise r
        return out

    def get_file(self, rpath, lpath, callback=DEFAULT_CALLBACK, outfile=None, **kwargs):
        if outfile is not None or isfilelike(lpath):
            return super().get_file(rpath, lpath, callback=callback, outfile=outfile, **kwargs)
        if self.isdir(rpath):
            os.makedirs(lpath, exist_ok=True)
            return None
        parent = os.path.dirname(os.fspath(lpath))
        if parent:
            os.makedirs(parent, exist_ok=True)
        bucket, key = _paths.split(self._strip_protocol(rpath))
        n = self.client.get(bucket, key, lpath)
        callback.set_size(n)
        callback.relative_update(n)
        return None

    # -- writes, refused --------------------------------------------------

    def pipe_file(self, path, value, **kwargs):
        raise _read_only(f"write {path!r}")

    def put_file(self, lpath, rpath, **kwargs):
        raise _read_only(f"put {rpath!r}")

    def cp_file(self, path1, path2, **kwargs):
        raise _read_only(f"copy to {path2!r}")

    def mv(self, path1, path2, **kwargs):
        raise _read_only(f"move {path1!r}")

    def rm_file(self, path):
        raise _read_only(f"remove {path!r}")

    def rm(self, path, recursive=False, maxdepth=None):
        raise _read_only(f"remove {path!r}")

    def rmdir(self, path):
        raise _read_only(f"remove {path!r}")

    def mkdir(self, path, create_parents=True, **kwargs):
        raise _read_only(f"make directory {path!r}")

    def makedirs(self, path, exist_ok=False):
        raise _read_only(f"make directory {path!r}")

    def touch(self, path, truncate=True, **kwargs):
        raise _read_only(f"touch {path!r}")


class ShoalFile(AbstractBufferedFile):
    """A read-only file of one object version."""

    def __init__(self, fs, path, reader, **kwargs):
        self._reader = reader
        super().__init__(fs, path, mode="rb", size=reader.size, **kwargs)
        self.etag = reader.etag

    def _fetch_range(self, start, end):
        return self._reader.read(start, end)

    def read(self, length=-1):
        # A read of at least the read-ahead goes to the reader as it is: its
        # bytes are copied once, into the bytes returned, not again out of the
        # read-ahead buffer.
        length = -1 if length is None else int(length)
        if length < 0:
            length = self.size - self.loc
        if self.closed or length < self.blocksize:
            return super().read(length)
        out = self._reader.read(self.loc, self.loc + length)
        self.loc += len(out)
        return out

    def readinto(self, b):
        # Into a caller's buffer (a bytearray, a NumPy array) in one copy.
        view = memoryview(b).cast("B")
        if self.closed or len(view) < self.blocksize:
            return super().readinto(b)
        n = self._reader.readinto(self.loc, view)
        self.loc += n
        return n
