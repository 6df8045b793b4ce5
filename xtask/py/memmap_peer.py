#!/usr/bin/env python3
"""Python peer of the memmap benchmark: DNANet's memmap read path on the same caches.

Usage: memmap_peer.py BENCH_DIR [--max-rows N] [--max-seconds S] [--seed SEED]

BENCH_DIR is the directory the criterion bench leaves behind (STOWAGE_BENCH_DIR), holding two
finalized caches in DNANet's memmap layout:
- f32x512/: 1,000,000 rows of one field x float32[512]
- dnanet/: 100,000 rows of data int16 (6, 4096), annotation int8 (6, 4096), scaler float32 (4096,)
Each has shapes.json, {"n": N, "<field>": {"shape": [...], "dtype": "<numpy descr>"}, ...} (other
keys are ignored), and one headerless C-order <field>.bin per field holding the n rows.

For each cache, every <field>.bin is opened with np.memmap(mode="r", dtype, shape=(n, *shape)) and
every page is touched before timing (maps warm, as in the Rust bench). Then, for rows in a shuffled
order (fixed seed; a new shuffle after every n rows, so rows are not in the CPU cache) until
--max-rows reads or --max-seconds have passed on that cache, whichever comes first, it reads a row
the way DNANet's reader does:

    {field: np.array(mm[i]) for field, mm in maps}

and prints one JSON line:

    {"python_memmap_copy_rows_per_s": <f32x512 rate>,
     "python_memmap_copy_dnanet_rows_per_s": <dnanet rate>,
     "rows": {"f32x512": ..., "dnanet": ...}, "seconds": {"f32x512": ..., "dnanet": ...}, ...}

Exits 1 with a message naming the file when a cache, its shapes.json or a .bin file is missing or a
.bin file does not hold exactly n rows. Needs numpy only.
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

PAGE = 4096
CHECK_CLOCK_EVERY = 256

# (cache directory, key of its rate in the JSON line), in the order they are measured.
CACHES = (
    ("f32x512", "python_memmap_copy_rows_per_s"),
    ("dnanet", "python_memmap_copy_dnanet_rows_per_s"),
)


def fail(message):
    """Stops with exit status 1: the bench data is not what the benchmark leaves behind."""
    sys.exit(f"memmap_peer: {message}")


def read_shapes(cache_dir):
    """(n, [(field, shape, dtype)]) from <cache_dir>/shapes.json, fields in file order."""
    path = os.path.join(cache_dir, "shapes.json")
    if not os.path.isfile(path):
        fail(f"{path} does not exist (is {cache_dir} a finalized memmap cache?)")
    try:
        with open(path, encoding="utf-8") as text:
            shapes = json.load(text)
    except (OSError, ValueError) as error:
        fail(f"{path}: cannot read it as JSON: {error}")
    n = shapes.get("n") if isinstance(shapes, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        fail(f"{path}: \"n\" must be a positive row count, found {n!r}")
    fields = [
        (name, tuple(entry["shape"]), np.dtype(entry["dtype"]))
        for name, entry in shapes.items()
        if isinstance(entry, dict) and "shape" in entry and "dtype" in entry
    ]
    if not fields:
        fail(f"{path}: no field entries ({{\"shape\": [...], \"dtype\": ...}})")
    return n, fields


def open_maps(cache_dir):
    """(n, {field: read-only memory map of <field>.bin with shape (n, *shape)}), pages touched."""
    n, fields = read_shapes(cache_dir)
    maps = {}
    for name, shape, dtype in fields:
        path = os.path.join(cache_dir, f"{name}.bin")
        if not os.path.isfile(path):
            fail(f"{path} does not exist (shapes.json lists the field {name!r})")
        expected = n * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        actual = os.path.getsize(path)
        if actual != expected:
            fail(
                f"{path} holds {actual} bytes, expected {expected} "
                f"(n = {n} rows of {dtype.str} {list(shape)})"
            )
        mm = np.memmap(path, dtype=dtype, mode="r", shape=(n,) + shape)
        if mm.nbytes:
            int(mm.reshape(-1).view(np.uint8)[::PAGE].sum())
        maps[name] = mm
    return n, maps


def shuffled_rows(n, count, rng):
    """`count` row numbers: shuffled epochs over all n rows, one after another."""
    epochs = -(-count // n)
    return np.concatenate([rng.permutation(n) for _ in range(epochs)])[:count].tolist()


def measure(maps, order, max_seconds):
    """(rows read, seconds): DNANet's per-row read over `order` until it ends or time is up."""
    fields = list(maps.items())
    rows = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    for i in order:
        {name: np.array(mm[i]) for name, mm in fields}
        rows += 1
        if rows % CHECK_CLOCK_EVERY == 0 and time.perf_counter() >= deadline:
            break
    return rows, time.perf_counter() - start


def main():
    """Checks and maps every cache of CACHES, then measures each and prints the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--max-rows", type=int, default=200_000)
    parser.add_argument("--max-seconds", type=float, default=2.0, help="per cache")
    parser.add_argument("--seed", type=int, default=512)
    args = parser.parse_args()
    if args.max_rows < 1:
        parser.error("--max-rows must be at least 1")

    result = {}
    rows_read = {}
    seconds_taken = {}
    row_counts = {}
    field_names = {}
    opened = []
    for cache, key in CACHES:
        cache_dir = os.path.join(args.bench_dir, cache)
        if not os.path.isdir(cache_dir):
            fail(f"{cache_dir} does not exist (the memmap benchmark leaves it behind)")
        opened.append((cache, key) + open_maps(cache_dir))
    rng = np.random.default_rng(args.seed)
    for cache, key, n, maps in opened:
        order = shuffled_rows(n, args.max_rows, rng)
        rows, seconds = measure(maps, order, args.max_seconds)
        result[key] = rows / seconds
        rows_read[cache] = rows
        seconds_taken[cache] = seconds
        row_counts[cache] = n
        field_names[cache] = list(maps)

    result.update(
        {
            "rows": rows_read,
            "seconds": seconds_taken,
            "n": row_counts,
            "fields": field_names,
            "seed": args.seed,
            "python": platform.python_version(),
            "numpy": np.__version__,
        }
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
