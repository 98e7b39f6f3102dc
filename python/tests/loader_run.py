"""One training-shaped run, as a subprocess of the tests: a dataset made once,
read for ``epochs`` epochs by the stand-in's DataLoader (``torchstub``) with
workers started by ``start``, as its arguments (JSON on stdin) say. Prints JSON: per epoch, every sample as (key, digest, worker id, worker pid, the
pid the worker's client reads with), and the origin's request count before
and after it. Transforms live here, at module level, so that spawn and
forkserver workers can unpickle them."""

import hashlib
import json
import os
import sys
import urllib.request


def _worker_runtime():
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (info.id, info.dataset.client.runtime_pid()) if info else (None, os.getpid())


def digest_bytes(key, data):
    return key, hashlib.md5(data).hexdigest(), os.getpid(), *_worker_runtime()


def digest_reader(key, reader):
    with reader:
        return key, hashlib.md5(reader.read()).hexdigest(), os.getpid(), *_worker_runtime()


def origin_requests(origin):
    with urllib.request.urlopen(f"http://{origin}/_origin/stats") as r:
        stats = json.load(r)
    return sum(r["count"] for r in stats["requests"])


def main():
    a = json.load(sys.stdin)
    import torch.utils.data as tud

    if a.get("init"):
        import torch.distributed as dist

        dist.init_process_group("gloo")
    from shoal.datasets import ShoalIterableDataset, ShoalMapDataset

    transform = digest_bytes if a["data"] == "bytes" else digest_reader
    source = {"keys": a["keys"]} if a.get("keys") else {"prefix": a["prefix"]}
    before = origin_requests(a["origin"])
    if a["kind"] == "map":
        ds = ShoalMapDataset(a["config"], transform=transform, data=a["data"], **source)
    else:
        ds = ShoalIterableDataset(a["config"], transform=transform, data=a["data"], **source)
    out = {"made": origin_requests(a["origin"]) - before, "len": len(ds), "epochs": []}
    for _ in range(a.get("epochs", 1)):
        before = origin_requests(a["origin"])
        loader = tud.DataLoader(ds, batch_size=a["batch"], num_workers=a["workers"], multiprocessing_context=a["start"])
        samples = []
        for _, _, batch in loader:
            samples.extend(batch)
        out["epochs"].append({"samples": samples, "origin": origin_requests(a["origin"]) - before})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
