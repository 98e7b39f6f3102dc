"""fsspec's own read-side tests of a filesystem (``fsspec.tests.abstract``) on
``shoal://`` over real nodes. Their fixtures, and a few of the tests, create
files through the filesystem under test; shoal is read-only, so those writes
are made in the origin itself with boto3 (``Seeded``), and every read, listing
and copy goes through shoal and the nodes."""

import posixpath

import pytest

import fsspec.tests.abstract as abstract
from shoal.fs import ShoalFileSystem


class OriginWriter:
    """The few writes the fixtures make, done at the origin."""

    def __init__(self, s3):
        self.s3 = s3

    def _split(self, path):
        bucket, key = path.split("/", 1)
        return bucket, key

    def pipe(self, path, value):
        bucket, key = self._split(path)
        self.s3.put_object(Bucket=bucket, Key=key, Body=value)

    def touch(self, path):
        self.pipe(path, b"")

    def makedirs(self, path, exist_ok=True):
        # S3 has no directories: a key's parents are implied by it.
        pass

    def rm(self, path, recursive=True):
        bucket, key = self._split(path)
        self.s3.delete_object(Bucket=bucket, Key=key)
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
        for page in pages:
            for o in page.get("Contents", []):
                self.s3.delete_object(Bucket=bucket, Key=o["Key"])


class Seeded(ShoalFileSystem):
    """``shoal://`` whose writes (the tests' set-up) go to the origin instead."""

    writer = None

    def touch(self, path, truncate=True, **kwargs):
        self.writer.touch(self._strip_protocol(path))

    def pipe_file(self, path, value, **kwargs):
        self.writer.pipe(self._strip_protocol(path), value)

    def mkdir(self, path, create_parents=True, **kwargs):
        pass

    def makedirs(self, path, exist_ok=False):
        pass

    def rm(self, path, recursive=False, maxdepth=None):
        for p in path if isinstance(path, list) else [path]:
            self.writer.rm(self._strip_protocol(p))


class ShoalFixtures(abstract.AbstractFixtures):
    @pytest.fixture(autouse=True)
    def through_the_nodes(self, cluster, fs):
        """Whatever a test reads comes from the nodes, never the origin itself."""
        with cluster.through_nodes(least=0, client=fs.client):
            yield

    @pytest.fixture
    def fs(self, cluster, writer):
        fs = Seeded(config=cluster.config_path, skip_instance_cache=True)
        fs.writer = writer
        return fs

    @pytest.fixture
    def fs_path(self, base):
        return base

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def supports_empty_directories(self):
        return False

    @pytest.fixture
    def writer(self, s3):
        return OriginWriter(s3)

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, writer, fs_join, fs_path):
        source = self._bulk_operations_scenario_0(writer, fs_join, fs_path)
        yield source
        writer.rm(source)

    @pytest.fixture
    def fs_glob_edge_cases_files(self, writer, fs_join, fs_path):
        source = self._glob_edge_cases_files(writer, fs_join, fs_path)
        yield source
        writer.rm(source)

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, writer, fs_join, fs_path):
        source = self._dir_and_file_with_same_name_prefix(writer, fs_join, fs_path)
        yield source
        writer.rm(source)

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, writer, fs_join, fs_path):
        source = self._10_files_with_hashed_names(writer, fs_join, fs_path)
        yield source
        writer.rm(source)

    @pytest.fixture
    def fs_target(self, fs_join, fs_path):
        # Nothing is ever written through shoal: nothing to remove.
        return fs_join(fs_path, "target")


class TestShoalGet(ShoalFixtures, abstract.AbstractGetTests):
    pass


class TestShoalOpen(ShoalFixtures, abstract.AbstractOpenTests):
    # fsspec's open tests hold one case, and it writes: shoal refuses it.
    @pytest.mark.xfail(raises=PermissionError, strict=True, reason="shoal:// is read-only")
    def test_open_exclusive(self, fs, fs_target):
        super().test_open_exclusive(fs, fs_target)
