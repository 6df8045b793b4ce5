#!/usr/bin/env python3
"""Python peer of the numpy10 benchmark: hangar's NUMPY_10 read path on the same data.

Usage: numpy10_peer.py BENCH_DIR [--max-rows N] [--max-seconds S] [--seed SEED]

BENCH_DIR is the cache the criterion bench leaves behind (STOWAGE_BENCH_DIR):
- records.txt: one NUMPY_10 record per line, `10:<uid>:<xxh64 hex>:<idx>:<dims joined by spaces>`
- data/10/<uid>.npy: the collection files the records point into.

Each referenced file is opened once with np.load(path, mmap_mode='r') and every page is touched
before timing (maps warm, as in the Rust bench). Then, for random records (fixed seed) until
--max-rows reads or --max-seconds have passed, whichever comes first, it reads the way hangar does:

    a = np.ascontiguousarray(mm[idx, :d0, :d1, ...])
    xxhash.xxh64_hexdigest(a.tobytes()) == checksum

and prints one JSON line: {"python_slice_xxhash_rows_per_s": ..., "rows": ..., "seconds": ..., ...}.
Exits 1 when a checksum does not match (the bench data or its writer is wrong).
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import xxhash

PAGE = 4096
CHECK_CLOCK_EVERY = 256


def load_records(bench_dir):
    """[(uid, checksum, idx, shape)] from records.txt."""
    path = os.path.join(bench_dir, "records.txt")
    records = []
    with open(path, encoding="ascii") as lines:
        for number, line in enumerate(lines, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            fields = line.split(":", 4)
            if len(fields) != 5 or fields[0] != "10":
                sys.exit(f"{path}:{number}: not a NUMPY_10 record: {line!r}")
            _, uid, checksum, idx, dims = fields
            shape = tuple(int(d) for d in dims.split(" ")) if dims else ()
            records.append((uid, checksum, int(idx), shape))
    if not records:
        sys.exit(f"{path}: no records")
    return records


def open_maps(bench_dir, uids):
    """{uid: read-only memory map of data/10/<uid>.npy}, every page touched once."""
    maps = {}
    for uid in sorted(uids):
        mm = np.load(os.path.join(bench_dir, "data", "10", f"{uid}.npy"), mmap_mode="r")
        if mm.nbytes:
            flat = mm.reshape(-1).view(np.uint8)
            int(flat[::PAGE].sum())
        maps[uid] = mm
    return maps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--max-rows", type=int, default=200_000)
    parser.add_argument("--max-seconds", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=10)
    args = parser.parse_args()

    records = load_records(args.bench_dir)
    maps = open_maps(args.bench_dir, {uid for uid, _, _, _ in records})
    reads = [
        (maps[uid], (idx,) + tuple(slice(0, d) for d in shape), checksum)
        for uid, checksum, idx, shape in records
    ]
    order = np.random.default_rng(args.seed).integers(0, len(reads), size=args.max_rows).tolist()

    mismatches = 0
    rows = 0
    start = time.perf_counter()
    deadline = start + args.max_seconds
    for i in order:
        mm, key, checksum = reads[i]
        a = np.ascontiguousarray(mm[key])
        if xxhash.xxh64_hexdigest(a.tobytes()) != checksum:
            mismatches += 1
        rows += 1
        if rows % CHECK_CLOCK_EVERY == 0 and time.perf_counter() >= deadline:
            break
    seconds = time.perf_counter() - start

    print(
        json.dumps(
            {
                "python_slice_xxhash_rows_per_s": rows / seconds,
                "rows": rows,
                "seconds": seconds,
                "records": len(records),
                "files": len(maps),
                "checksum_mismatches": mismatches,
                "seed": args.seed,
                "python": platform.python_version(),
                "numpy": np.__version__,
                "xxhash": xxhash.VERSION,
            }
        )
    )
    if mismatches:
        print(
            f"numpy10_peer: {mismatches} of {rows} reads did not match their record's checksum",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
