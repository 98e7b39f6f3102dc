#!/usr/bin/env python3
"""The Kubernetes API as far as shoal reads it, for the system tests.

  kube-api.py --listen IP --addr-file F --token T --node NAME --zone Z

Serves, for requests bearing token T:
  GET /api/v1/nodes/NAME                     the node, with its zone label
  GET /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices
      ?labelSelector=kubernetes.io/service-name=SVC
                                             the Service's slices and the
                                             store's resourceVersion
      ...&watch=1&resourceVersion=R          every change after R as JSON lines
      [&allowWatchBookmarks=true]            (ADDED, MODIFIED, DELETED), then
      [&timeoutSeconds=N]                    the live ones, with a BOOKMARK every
                                             second when asked, ended after N s;
                                             a forgotten R gets the 410 ERROR
and, to change the store:
  PUT    /_test/slices/NS/NAME  {"service", "port_name", "port",
                                 "endpoints": [{"address", "ready", "zone"}]}
                                (no port and no endpoints: the placeholder the
                                controller leaves for a Service with no pod)
  DELETE /_test/slices/NS/NAME
  POST   /_test/expire          forgets the history, as a restart of the API
Each request is logged to stderr: its status, method and path.

Objects are written as the API server writes them, its Go types through Go's
encoding/json: a list field without omitempty ("endpoints", "ports") is null
when it holds nothing, an unset pointer field ("zone", "nodeName", a
condition) is left out. An endpoint's conditions are the controller's for a
pod: ready and serving as "ready", not terminating.
"""
import argparse
import http.server
import json
import sys
import threading
import time
import urllib.parse

SERVICE_LABEL = "kubernetes.io/service-name"
BOOKMARK_EVERY = 1.0


def go_list(items):
    """A Go list field without omitempty: null when it holds nothing (what an
    empty one is once stored)."""
    return items or None


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Store:
    def __init__(self):
        self.cond = threading.Condition()
        self.version = 1
        self.expired_at = 0
        self.slices = {}  # (ns, name) -> (version, spec)
        self.history = []  # (version, ns, service, type, object)

    def obj(self, ns, name, version, spec):
        def endpoint(e):
            ready = bool(e.get("ready", True))
            out = {"addresses": [e["address"]],
                   "conditions": {"ready": ready, "serving": ready, "terminating": False},
                   "targetRef": {"kind": "Pod", "namespace": ns,
                                 "name": "pod-" + e["address"].replace(".", "-")}}
            if e.get("zone"):
                out["zone"] = e["zone"]
            return out

        ports = []
        if spec.get("port") is not None:
            ports.append({"name": spec.get("port_name", ""), "protocol": "TCP",
                          "port": int(spec["port"])})
        return {
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"name": name, "generateName": spec["service"] + "-", "namespace": ns,
                         "resourceVersion": str(version), "generation": version,
                         "creationTimestamp": "2025-01-01T00:00:00Z",
                         "labels": {SERVICE_LABEL: spec["service"],
                                    "endpointslice.kubernetes.io/managed-by":
                                        "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": go_list([endpoint(e) for e in spec.get("endpoints") or []]),
            "ports": go_list(ports),
        }

    def put(self, ns, name, spec):
        with self.cond:
            self.version += 1
            kind = "MODIFIED" if (ns, name) in self.slices else "ADDED"
            self.slices[(ns, name)] = (self.version, spec)
            self.history.append((self.version, ns, spec["service"], kind,
                                 self.obj(ns, name, self.version, spec)))
            self.cond.notify_all()

    def delete(self, ns, name):
        with self.cond:
            old = self.slices.pop((ns, name), None)
            if old is None:
                return
            self.version += 1
            self.history.append((self.version, ns, old[1]["service"], "DELETED",
                                 self.obj(ns, name, self.version, old[1])))
            self.cond.notify_all()

    def expire(self):
        with self.cond:
            self.version += 1
            self.expired_at = self.version
            self.history.clear()
            self.cond.notify_all()

    def listing(self, ns, svc):
        with self.cond:
            items = [self.obj(n, name, v, s) for (n, name), (v, s) in sorted(self.slices.items())
                     if n == ns and s["service"] == svc]
            return {"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                    "metadata": {"resourceVersion": str(self.version)}, "items": items}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--addr-file", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--zone", required=True)
    a = p.parse_args()
    store = Store()

    class H(http.server.BaseHTTPRequestHandler):
        # HTTP/1.0: a watch's body ends when the connection does.
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def send(self, code, body):
            b = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)
            print(code, self.command, self.path, file=sys.stderr, flush=True)

        def authorized(self):
            if self.headers.get("Authorization") == "Bearer " + a.token:
                return True
            self.send(401, status(401, "Unauthorized", "Unauthorized"))
            return False

        def do_GET(self):
            if not self.authorized():
                return
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            parts = url.path.strip("/").split("/")
            if url.path == "/api/v1/nodes/" + a.node:
                return self.send(200, {"kind": "Node", "apiVersion": "v1", "metadata": {
                    "name": a.node, "labels": {"topology.kubernetes.io/zone": a.zone}}})
            if parts[:4] == ["apis", "discovery.k8s.io", "v1", "namespaces"] and \
                    len(parts) == 6 and parts[5] == "endpointslices":
                sel = q.get("labelSelector", "")
                if not sel.startswith(SERVICE_LABEL + "="):
                    return self.send(400, status(400, "BadRequest",
                                                 "a service-name selector is required here"))
                ns, svc = parts[4], sel.split("=", 1)[1]
                if q.get("watch") in ("1", "true"):
                    return self.watch(ns, svc, q)
                return self.send(200, store.listing(ns, svc))
            self.send(404, status(404, "NotFound", "the server could not find the requested resource"))

        def watch(self, ns, svc, q):
            rv = q.get("resourceVersion", "")
            bookmarks = q.get("allowWatchBookmarks") == "true"
            end = time.monotonic() + int(q.get("timeoutSeconds", "1800"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            print(200, self.command, self.path, file=sys.stderr, flush=True)

            def line(ev):
                self.wfile.write(json.dumps(ev).encode() + b"\n")
                self.wfile.flush()

            try:
                with store.cond:
                    if not rv.isdigit() or int(rv) < store.expired_at:
                        line({"type": "ERROR",
                              "object": status(410, "Expired", "too old resource version")})
                        return
                    seen, epoch = int(rv), store.expired_at
                while time.monotonic() < end:
                    with store.cond:
                        store.cond.wait_for(lambda: store.version > seen or store.expired_at != epoch,
                                            timeout=BOOKMARK_EVERY)
                        if store.expired_at != epoch:
                            return  # the API "restarted": the watch ends
                        new = [h for h in store.history if h[0] > seen]
                        version = store.version
                    for v, n, s, kind, obj in new:
                        if n == ns and s == svc:
                            line({"type": kind, "object": obj})
                    seen = version
                    if bookmarks and not new:
                        # An empty slice at Go's zero values, but its version.
                        line({"type": "BOOKMARK", "object": {
                            "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                            "metadata": {"resourceVersion": str(seen), "creationTimestamp": None},
                            "addressType": "", "endpoints": None, "ports": None}})
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_PUT(self):
            parts = self.path.strip("/").split("/")
            if parts[:2] != ["_test", "slices"] or len(parts) != 4:
                return self.send(404, {"message": "not found"})
            spec = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            store.put(parts[2], parts[3], spec)
            self.send(200, {"resourceVersion": str(store.version)})

        def do_DELETE(self):
            parts = self.path.strip("/").split("/")
            if parts[:2] != ["_test", "slices"] or len(parts) != 4:
                return self.send(404, {"message": "not found"})
            store.delete(parts[2], parts[3])
            self.send(200, {"resourceVersion": str(store.version)})

        def do_POST(self):
            if self.path != "/_test/expire":
                return self.send(404, {"message": "not found"})
            store.expire()
            self.send(200, {"resourceVersion": str(store.version)})

    s = http.server.ThreadingHTTPServer((a.listen, 0), H)
    s.daemon_threads = True
    with open(a.addr_file, "w") as f:
        f.write("%s:%d" % s.server_address)
    s.serve_forever()


if __name__ == "__main__":
    main()
