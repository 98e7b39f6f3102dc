"""A real cluster on loopback for the tests: the test origin (a real S3 server)
and shoal-node processes, from the workspace's release build."""

import contextlib
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


def sample(text, series):
    """The value of ``series`` (name and labels, as exposed) in a Prometheus
    page. Every series a process knows is on its page from the start: one that
    is not there is misspelt, and fails."""
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not line.startswith("#") and name == series:
            return float(value)
    raise AssertionError(f"{series} is not on the page:\n{text}")


def family_sum(text, name):
    """The sum of every sample of ``name``, whatever its labels (0 for a
    family declared with none yet); a family not on the page fails."""
    values = [
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if not line.startswith("#") and line.rpartition(" ")[0].split("{")[0] == name
    ]
    declared = any(line.split()[2:3] in ([name], [name.removesuffix("_total")])
                   for line in text.splitlines() if line.startswith("# TYPE "))
    assert values or declared, f"no family {name} on the page:\n{text}"
    return sum(values)


def from_origin(client):
    """Bytes a client read from the origin itself (its fallbacks)."""
    return sample(client.metrics(), 'shoal_client_bytes_total{source="origin"}')


def from_nodes(client):
    return sample(client.metrics(), 'shoal_client_bytes_total{source="node"}')


def _settled(look, timeout=10):
    """``look()`` once two looks 50 ms apart agree (what was in flight has landed)."""
    deadline = time.time() + timeout
    last = look()
    while True:
        time.sleep(0.05)
        now = look()
        if now == last or time.time() > deadline:
            return now
        last = now


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

    def node_page(self, i):
        with urllib.request.urlopen(f"http://{self.nodes[i]}/metrics", timeout=5) as r:
            return r.read().decode()

    def live(self):
        return [i for i in range(len(self.nodes)) if self.procs[f"node{i}"].poll() is None]

    def counts(self):
        """(body bytes the live nodes served, object GETs they asked of the
        origin, object GETs the origin answered), once settled."""

        def look():
            served = asked = 0.0
            for i in self.live():
                page = self.node_page(i)
                served += family_sum(page, "shoal_node_bytes_served_total")
                for kind in ("block", "range", "object"):
                    asked += sample(page, f'shoal_node_origin_requests_total{{kind="{kind}"}}')
            return served, asked, self.origin_gets()

        return _settled(look)

    @contextlib.contextmanager
    def through_nodes(self, least=1, client=None):
        """The reads in the ``with`` went through the nodes: they served at
        least ``least`` body bytes, every object GET the origin answered was
        one of theirs, and ``client`` (when the reads are its own, not forked
        workers') read no byte from the origin itself, and no more from the
        nodes than they say they served."""
        served, asked, gets = self.counts()
        own = (from_origin(client), from_nodes(client)) if client is not None else None
        yield
        served2, asked2, gets2 = self.counts()
        assert served2 - served >= least, f"the nodes served {served2 - served} bytes, not {least} or more"
        if client is not None:
            took = from_nodes(client) - own[1]
            assert served2 - served >= took, f"the client took {took} bytes from nodes that served {served2 - served}"
        assert gets2 - gets == asked2 - asked, (
            f"the origin answered {gets2 - gets} object GETs, the nodes asked {asked2 - asked}: "
            "a client read the origin itself"
        )
        if client is not None:
            assert from_origin(client) == own[0], "the client read from the origin itself"

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
