#!/usr/bin/env python3
"""Writes routing-v1.json: golden vectors for shoal's block placement (routing v1).

An independent implementation of DESIGN.md "Routing" (python `xxhash`), so the Rust
test that checks these vectors checks the spec, not itself. Deterministic: running
it again writes the same file. Usage: python3 gen_routing_v1.py > routing-v1.json
"""
import json
import math
import random
import struct
import sys

import xxhash

SEED = int.from_bytes(b"shoal_v1", "big")


def h(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data, seed=SEED)


def block_hash(bucket: str, key: str, index: int) -> int:
    b, k = bucket.encode(), key.encode()
    return h(struct.pack("<I", len(b)) + b + struct.pack("<I", len(k)) + k + struct.pack("<Q", index))


def ranking(nodes, bucket, key, index):
    bh = block_hash(bucket, key, index)
    weighted = any(n["weight"] != 1.0 for n in nodes)
    rows = []
    for n in nodes:
        s = h(struct.pack("<Q", h(n["id"].encode())) + struct.pack("<Q", bh))
        if weighted:
            u = ((s >> 11) + 0.5) / 2.0**53
            k = n["weight"] / -math.log(u)
        else:
            k = 0.0
        rows.append((-k, -s, n["id"].encode(), n["id"]))
    rows.sort()
    return [r[3] for r in rows]


def main():
    rng = random.Random(20261129)
    keys = [
        "",
        "k",
        "data/train/part-00000.parquet",
        "with space/and+plus%25",
        "ünïcødé/日本語/ファイル.bin",
        "emoji/🦀🐟",
        "//double//slash",
        "x" * 1024,
        "deep/" * 200 + "leaf",
    ]
    buckets = ["b", "my-bucket", "a.b.c", "x" * 63]
    indexes = [0, 1, 2, 7, 1023, 2**20, 2**32 - 1, 2**32, 2**40 - 1, 2**40]

    def node_ids(n):
        style = rng.randrange(3)
        if style == 0:
            return [f"10.0.{i // 250}.{i % 250 + 1}:9000" for i in range(n)]
        if style == 1:
            return [f"cache-{i}.shoal.svc.cluster.local:9100" for i in range(n)]
        return [f"[fd00::{i + 1:x}]:9000" if i % 2 else f"node{i}.example.com:{9000 + i}" for i in range(n)]

    cases = []
    counts = list(range(1, 51)) * 2 + [1, 2, 3, 5, 8, 13, 21, 34, 50] * 12
    for i, n in enumerate(counts):
        ids = node_ids(n)
        weighted = i % 2 == 1
        nodes = []
        for nid in ids:
            w = 1.0
            if weighted:
                w = rng.choice([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, round(rng.uniform(0.1, 5.0), 3)])
            nodes.append({"id": nid, "weight": w})
        # The list order given to the ranker must not matter.
        rng.shuffle(nodes)
        bucket = buckets[i % len(buckets)]
        key = keys[i % len(keys)] if i % 5 else f"obj/{rng.randrange(10**9)}"
        index = indexes[i % len(indexes)] if i % 4 else rng.randrange(2**40 + 1)
        cases.append({"nodes": nodes, "bucket": bucket, "key": key, "index": index,
                      "ranking": ranking(nodes, bucket, key, index)})
    json.dump(cases, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
