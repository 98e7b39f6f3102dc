"""A real cluster on loopback for the tests: the test origin (a real S3 server)
and shoal-node processes, from the workspace's release build."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SHOAL_BIN", os.path.join(ROOT, "target", "release"))
BUCKET = "shoal-py"
ORIGIN_KEY, ORIGIN_SECRET = "py-origin", "py-origin-secret-0123456789"
CLUSTER_KEY, CLUSTER_SECRET = "py-cluster", "py-cluster-secret-0123456789"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what, ok, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ok():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


def _healthy(addr):
    try:
        with urllib.request.urlopen(f"http://{addr}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


class Cluster:
    def __init__(self, nodes=3):
        for b in ("shoal-test-origin", "shoal-node"):
            if not os.access(os.path.join(BIN, b), os.X_OK):
                raise RuntimeError(f"no {b} in {BIN}: build the workspace (cargo build --release) first")
        self.dir = tempfile.mkdtemp(prefix="shoal-py-")
        self.procs = {}
        addr_file = os.path.join(self.dir, "origin.addr")
        self._start(
            "origin",
            [
                os.path.join(BIN, "shoal-test-origin"),
                "--listen", "127.0.0.1:0",
                "--access-key", ORIGIN_KEY,
                "--bucket", BUCKET,
                "--addr-file", addr_file,
            ],
            {"SHOAL_ORIGIN_SECRET_KEY": ORIGIN_SECRET},
        )
        _wait("the origin", lambda: os.path.exists(addr_file) and open(addr_file).read().strip())
        self.origin = open(addr_file).read().strip()
        self.nodes = []
        for i in range(nodes):
            port = _free_port()
            addr = f"127.0.0.1:{port}"
            conf = os.path.join(self.dir, f"node{i}.toml")
            with open(conf, "w") as f:
                f.write(
                    f"""{self._origin_toml()}
[node]
listen = "{addr}"
[cache]
ram_size = "128MiB"
disk_size = "256MiB"
data_dir = "{self.dir}/node{i}"
[auth]
[[auth.keys]]
access_key_id = "{CLUSTER_KEY}"
secret_access_key = "{CLUSTER_SECRET}"
"""
                )
            self._start(f"node{i}", [os.path.join(BIN, "shoal-node"), "--config", conf], {"RUST_LOG": "warn"})
            self.nodes.append(addr)
        for n in self.nodes:
            _wait(f"node {n}", lambda n=n: _healthy(n))
        self.config_path = os.path.join(self.dir, "mount.toml")
        with open(self.config_path, "w") as f:
            f.write(self.client_toml())

    def _origin_toml(self):
        return f"""[origin]
endpoint = "http://{self.origin}"
[origin.credentials]
access_key_id = "{ORIGIN_KEY}"
secret_access_key = "{ORIGIN_SECRET}"
"""

    def client_toml(self):
        nodes = ", ".join(f'"{n}"' for n in self.nodes)
        return f"""{self._origin_toml()}
[cluster]
nodes = [{nodes}]
[cluster.credentials]
access_key_id = "{CLUSTER_KEY}"
secret_access_key = "{CLUSTER_SECRET}"
[cache]
ram_size = "64MiB"
"""

    def config_dict(self):
        return {
            "origin": {
                "endpoint": f"http://{self.origin}",
                "credentials": {"access_key_id": ORIGIN_KEY, "secret_access_key": ORIGIN_SECRET},
            },
            "cluster": {
                "nodes": list(self.nodes),
                "credentials": {"access_key_id": CLUSTER_KEY, "secret_access_key": CLUSTER_SECRET},
            },
            "cache": {"ram_size": "64MiB"},
        }

    def _start(self, name, argv, env):
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")
        self.procs[name] = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=log)

    def kill_node(self, i):
        p = self.procs[f"node{i}"]
        p.send_signal(signal.SIGKILL)
        p.wait()

    def s3(self):
        """boto3 straight to the origin: the tests' writes (shoal is read-only)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=f"http://{self.origin}",
            aws_access_key_id=ORIGIN_KEY,
            aws_secret_access_key=ORIGIN_SECRET,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def origin_stats(self):
        with urllib.request.urlopen(f"http://{self.origin}/_origin/stats") as r:
            return json.load(r)

    def origin_gets(self, prefix=""):
        """Object GETs the origin has served under ``prefix`` (listings apart)."""
        return sum(
            r["count"]
            for r in self.origin_stats()["requests"]
            if r["method"] == "GET" and r["key"] and r["key"].startswith(prefix)
        )

    def origin_heads(self, prefix=""):
        return sum(
            r["count"]
            for r in self.origin_stats()["requests"]
            if r["method"] == "HEAD" and r["key"].startswith(prefix)
        )

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
