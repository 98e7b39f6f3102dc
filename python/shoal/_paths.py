"""Paths of the ``shoal://`` filesystem: ``BUCKET/KEY``, the protocol stripped."""


def split(path):
    """``(bucket, key)`` of a stripped path; the key may be empty."""
    path = path.lstrip("/")
    bucket, _, key = path.partition("/")
    return bucket, key.strip("/")


def join(bucket, key):
    return f"{bucket}/{key}" if key else bucket


def parents(path, top):
    """The directories between ``top`` (excluded) and ``path`` (excluded)."""
    out = []
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    while parent and len(parent) > len(top) and parent.startswith(top):
        out.append(parent)
        parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    return out
