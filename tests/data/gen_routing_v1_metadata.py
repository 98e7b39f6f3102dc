#!/usr/bin/env python3
"""Writes routing-v1-metadata.json: golden vectors for routing listings and HEADs.

DESIGN.md "The fleet": a LIST page's identity is the block identity with key
"\\0list\\0" + prefix + "\\0" + delimiter + "\\0" + continuation and index 0; a HEAD's
is the object's block 0. Computed with gen_routing_v1.py's independent ranker, so
the Rust test checks the spec, not itself. Deterministic.
Usage: python3 gen_routing_v1_metadata.py > routing-v1-metadata.json
"""
import json
import random
import sys

from gen_routing_v1 import ranking


def main():
    rng = random.Random(20261202)
    pages = [
        ("", "/", ""),
        ("data/", "/", ""),
        ("data/", "/", "1GZ4dGtleS9wYXJ0LTAwMDk5"),
        ("data/train/", "", ""),
        ("ünïcødé/日本語/", "/", ""),
        ("with space/and+plus%25", "/", "token with spaces"),
        ("", "", ""),
        ("x" * 900, "/", "y" * 100),
    ]
    cases = []
    for i in range(64):
        n = [1, 2, 3, 5, 8, 13][i % 6]
        nodes = [{"id": f"10.0.0.{j + 1}:9000", "weight": 1.0} for j in range(n)]
        rng.shuffle(nodes)
        bucket = ["b", "my-bucket", "a.b.c"][i % 3]
        prefix, delimiter, continuation = pages[i % len(pages)]
        key = "\0list\0" + prefix + "\0" + delimiter + "\0" + continuation
        cases.append({"nodes": nodes, "bucket": bucket, "prefix": prefix,
                      "delimiter": delimiter, "continuation": continuation,
                      "ranking": ranking(nodes, bucket, key, 0)})
    json.dump(cases, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
