#!/usr/bin/env python3
"""Python peer of the arrow benchmark: torchcachex 0.2's read and write paths on the same files.

Usage: arrow_peer.py BENCH_DIR [--max-batches N] [--max-seconds S] [--seed SEED]

BENCH_DIR is the directory the criterion bench leaves behind (STOWAGE_BENCH_DIR). Its f32x512/ is
a cache in torchcachex's layout written by stowage: segments/segment_<id>.arrow, one Arrow IPC
file per flush with the columns key (utf8), data (list<float>) and shape (list<int64>), keys
sample0000000, sample0000001, ...

get_batch: the key index {key: (segment id, row)} is built from the segments' key columns in
numeric segment order (what torchcachex keeps in memory after loading index.pkl; not timed). Then,
for batches of 1,000 keys from shuffled epochs over every key (fixed seed) until --max-batches
batches or --max-seconds have passed, it does what torchcachex's get_batch does on an LRU miss:
group the keys by segment; per segment, pa.memory_map the file, pa.ipc.open_file, read_all, take
the rows, to_numpy every column, and rebuild each sample from its row (a writable copy of the
values reshaped to the stored shape, as torch.from_numpy(...).reshape(shape) would).

put_flush: 2,048 float32[512] samples (the bench's values) put and flushed into a scratch cache
the way torchcachex does with async_write=False: each sample serialized with
.flatten().tolist() and list(shape); the flush builds pa.RecordBatch.from_pydict over the pending
rows, writes segment_<id>.arrow.tmp with pa.ipc.new_file, renames it, updates the in-memory index
and re-pickles the whole index (holding every key of f32x512/ plus the new ones) to index.pkl.tmp
and renames it. No fsync anywhere: torchcachex's durability. Repeated until --max-seconds.

Prints one JSON line:

    {"python_get_batch_rows_per_s": ..., "python_put_flush_rows_per_s": ...,
     "rows": {"get_batch": ..., "put_flush": ...}, "seconds": {...}, ...}

Exits 1 with a message naming the file when the cache or a segment is missing or unreadable.
Needs numpy and pyarrow.
"""

import argparse
import json
import os
import pickle
import platform
import shutil
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.ipc

BATCH = 1000
WRITE_ROWS = 2048
WIDTH = 512


def fail(message):
    """Stops with exit status 1: the bench data is not what the benchmark leaves behind."""
    sys.exit(f"arrow_peer: {message}")


def list_segments(cache_dir):
    """[(id, path)] of segments/segment_<id>.arrow, in numeric id order."""
    segments_dir = os.path.join(cache_dir, "segments")
    if not os.path.isdir(segments_dir):
        fail(f"{segments_dir} does not exist (the arrow benchmark leaves it behind)")
    found = []
    for name in os.listdir(segments_dir):
        stem, dot, extension = name.partition(".")
        if extension == "arrow" and stem.startswith("segment_") and stem[8:].isdigit():
            found.append((int(stem[8:]), os.path.join(segments_dir, name)))
    if not found:
        fail(f"{segments_dir} holds no segment_<id>.arrow")
    return sorted(found)


def build_index(segments):
    """({key: (segment id, row)}, the segments' schema): later rows and segments win."""
    index = {}
    schema = None
    for segment_id, path in segments:
        try:
            with pa.memory_map(path, "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as error:
            fail(f"{path}: not a readable Arrow IPC file: {error}")
        schema = table.schema
        for row, key in enumerate(table.column("key").to_pylist()):
            index[key] = (segment_id, row)
    return index, schema


def deserialize(row):
    """torchcachex's _deserialize_sample for the tensor structure, numpy standing in for torch."""
    data = row["data"] if isinstance(row["data"], np.ndarray) else np.array(row["data"])
    data = np.array(data, copy=True) if not data.flags.writeable else data
    return data.reshape(tuple(row["shape"]))


def get_batch(paths, index, keys):
    """torchcachex's get_batch on an LRU miss: samples of `keys` in order, None when missing."""
    results = [None] * len(keys)
    segment_reads = {}
    for position, key in enumerate(keys):
        located = index.get(key)
        if located is not None:
            segment_id, row = located
            segment_reads.setdefault(segment_id, []).append((key, row, position))
    for segment_id, reads in segment_reads.items():
        with pa.memory_map(paths[segment_id], "r") as source:
            reader = pa.ipc.open_file(source)
            table = reader.read_all()
            subtable = table.take([row for _, row, _ in reads])
            columns = {name: subtable[name].to_numpy() for name in subtable.column_names}
            for at, (_, _, position) in enumerate(reads):
                results[position] = deserialize({k: v[at] for k, v in columns.items()})
    return results


def measure_get_batch(paths, index, rng, max_batches, max_seconds):
    """(rows read, seconds) of get_batch over shuffled epochs of every key."""
    keys = sorted(index)
    rows = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    order = np.array([], dtype=np.int64)
    for _ in range(max_batches):
        if len(order) < BATCH:
            order = np.concatenate([order, rng.permutation(len(keys))])
        batch = [keys[i] for i in order[:BATCH]]
        order = order[BATCH:]
        results = get_batch(paths, index, batch)
        if results[0] is None or results[0].shape != (WIDTH,):
            fail(f"get_batch returned {results[0]!r} for {batch[0]!r}")
        rows += len(batch)
        if time.perf_counter() >= deadline:
            break
    return rows, time.perf_counter() - start


def flush_segment(segments_dir, segment_id, schema, pending, index, index_path):
    """torchcachex's _flush_segment without fsync: segment via .tmp + rename, index re-pickled."""
    arrays = {}
    for field in schema:
        values = []
        for _, row in pending:
            value = row.get(field.name)
            if value is None:
                if pa.types.is_list(field.type):
                    value = []
                elif pa.types.is_binary(field.type):
                    value = b""
            values.append(value)
        arrays[field.name] = values
    record_batch = pa.RecordBatch.from_pydict(arrays, schema=schema)
    temp = os.path.join(segments_dir, f"segment_{segment_id:06d}.arrow.tmp")
    final = os.path.join(segments_dir, f"segment_{segment_id:06d}.arrow")
    with pa.OSFile(temp, "wb") as sink:
        writer = pa.ipc.new_file(sink, schema)
        writer.write_batch(record_batch)
        writer.close()
    os.replace(temp, final)
    for row, (key, _) in enumerate(pending):
        index[key] = (segment_id, row)
    with open(index_path + ".tmp", "wb") as out:
        pickle.dump(index, out, protocol=5)
    os.replace(index_path + ".tmp", index_path)


def measure_put_flush(scratch, schema, index, max_seconds):
    """(rows written, seconds) of 2,048 puts (serialized as torchcachex does) and a flush."""
    samples = [
        np.arange(i * WIDTH, (i + 1) * WIDTH, dtype=np.float32) * np.float32(0.5)
        for i in range(WRITE_ROWS)
    ]
    rows = 0
    seconds = 0.0
    segment_id = 0
    while seconds < max_seconds or rows == 0:
        shutil.rmtree(scratch, ignore_errors=True)
        segments_dir = os.path.join(scratch, "segments")
        os.makedirs(segments_dir)
        cache_index = dict(index)
        start = time.perf_counter()
        pending = []
        for i, tensor in enumerate(samples):
            key = f"new{segment_id:04d}-{i:07d}"
            pending.append(
                (key, {"key": key, "data": tensor.flatten().tolist(), "shape": list(tensor.shape)})
            )
        flush_segment(
            segments_dir, segment_id, schema, pending, cache_index,
            os.path.join(scratch, "index.pkl"),
        )
        seconds += time.perf_counter() - start
        rows += WRITE_ROWS
        segment_id += 1
    shutil.rmtree(scratch, ignore_errors=True)
    return rows, seconds


def main():
    """Indexes f32x512/, measures get_batch and put_flush, prints the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--max-batches", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--seed", type=int, default=512)
    args = parser.parse_args()
    if args.max_batches < 1:
        parser.error("--max-batches must be at least 1")

    cache_dir = os.path.join(args.bench_dir, "f32x512")
    segments = list_segments(cache_dir)
    index, schema = build_index(segments)
    paths = dict(segments)
    rng = np.random.default_rng(args.seed)
    read_rows, read_seconds = measure_get_batch(
        paths, index, rng, args.max_batches, args.max_seconds
    )
    scratch = os.path.join(args.bench_dir, "peer-write-scratch")
    write_rows, write_seconds = measure_put_flush(scratch, schema, index, args.max_seconds)
    print(
        json.dumps(
            {
                "python_get_batch_rows_per_s": read_rows / read_seconds,
                "python_put_flush_rows_per_s": write_rows / write_seconds,
                "rows": {"get_batch": read_rows, "put_flush": write_rows},
                "seconds": {"get_batch": read_seconds, "put_flush": write_seconds},
                "keys": len(index),
                "segments": len(segments),
                "seed": args.seed,
                "python": platform.python_version(),
                "numpy": np.__version__,
                "pyarrow": pa.__version__,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
