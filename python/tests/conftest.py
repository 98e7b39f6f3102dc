import uuid

import pytest

from cluster import BUCKET, Cluster


@pytest.fixture(scope="session")
def cluster():
    c = Cluster(nodes=3)
    yield c
    c.stop()


@pytest.fixture(scope="session")
def s3(cluster):
    return cluster.s3()


@pytest.fixture
def fs(cluster):
    import fsspec

    return fsspec.filesystem("shoal", config=cluster.config_path)


@pytest.fixture
def base():
    """A prefix of the test bucket no other test uses (the nodes cache listings)."""
    return f"{BUCKET}/t-{uuid.uuid4().hex[:12]}"


def put(s3, path, data):
    bucket, key = path.split("/", 1)
    s3.put_object(Bucket=bucket, Key=key, Body=data)
