"""Python peers of `stowage bench`: each original tool's read path, on the caches stowage wrote.

Reads a JSON plan on stdin:

    {"max_seconds": 3.0, "caches": [
        {"backend": "npy", "dir": ..., "records": [[record, field], ...]},  # hangar NUMPY_10
        {"backend": "memmap", "dir": ..., "rows": [...]},                   # DNANet memmap rows
        {"backend": "arrow", "dir": ..., "keys": [...]},                    # torchcachex segments
        {"backend": "hdf5", "dir": ..., "keys": [...]}]}                    # h5py slices

(records, rows and keys in the read order stowage used) and prints one JSON line:

    {"rates": [{"name": ..., "what": ..., "rows_per_s": ...}, ...], "python": ..., ...}

Each peer reads until its list ends or max_seconds have passed. A peer whose Python packages
are missing is reported with "missing" instead of a rate; a wrong value is an error (exit 1).
"""

import json
import os
import platform
import sys
import time

PLAN = json.load(sys.stdin)
MAX_SECONDS = float(PLAN.get("max_seconds", 3.0))
BATCH = 1000


def timed(items, read):
    """(items read, seconds): `read(item)` over `items` until they end or time is up."""
    done = 0
    start = time.perf_counter()
    for item in items:
        read(item)
        done += 1
        if done % 64 == 0 and time.perf_counter() - start >= MAX_SECONDS:
            break
    return done, time.perf_counter() - start


def npy_peer(cache):
    """hangar's NUMPY_10 read: slice the collection file's memmap, hash with xxh64, compare."""
    import numpy as np
    import xxhash

    maps = {}

    def read(item):
        record, _field = item
        _, uid, checksum, idx, shape = record.split(":", 4)
        mm = maps.get(uid)
        if mm is None:
            mm = maps[uid] = np.load(os.path.join(cache["dir"], "data", "10", uid + ".npy"),
                                     mmap_mode="r")
        dims = tuple(int(d) for d in shape.split()) if shape else ()
        a = np.ascontiguousarray(mm[(int(idx),) + tuple(slice(0, d) for d in dims)])
        if xxhash.xxh64_hexdigest(a.tobytes()) != checksum:
            sys.exit(f"npy peer: checksum mismatch for {record}")

    return "np.load(mmap_mode='r') slice + xxhash.xxh64, hangar's read", timed(cache["records"], read)


def memmap_peer(cache):
    """DNANet's read: np.array(mm[i]) for the np.memmap of every field's .bin."""
    import numpy as np

    with open(os.path.join(cache["dir"], "shapes.json"), encoding="utf-8") as text:
        shapes = json.load(text)
    n = shapes["n"]
    maps = [np.memmap(os.path.join(cache["dir"], name + ".bin"), dtype=np.dtype(entry["dtype"]),
                      mode="r", shape=(n,) + tuple(entry["shape"]))
            for name, entry in shapes.items() if isinstance(entry, dict) and "shape" in entry]

    def read(row):
        for mm in maps:
            np.array(mm[row])

    return "np.array(np.memmap(...)[i]) per field, DNANet's read", timed(cache["rows"], read)


def arrow_peer(cache):
    """torchcachex's get_batch: per segment open_file + read_all + take + to_numpy."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc

    segments_dir = os.path.join(cache["dir"], "segments")
    index, paths = {}, {}
    names = sorted((n for n in os.listdir(segments_dir) if n.endswith(".arrow")),
                   key=lambda n: int(n[len("segment_"):-len(".arrow")]))
    for name in names:
        segment = int(name[len("segment_"):-len(".arrow")])
        paths[segment] = os.path.join(segments_dir, name)
        with pa.memory_map(paths[segment], "r") as source:
            for row, key in enumerate(pa.ipc.open_file(source).read_all().column("key").to_pylist()):
                index[key] = (segment, row)
    keys = cache["keys"]
    batches = [keys[i:i + BATCH] for i in range(0, len(keys), BATCH)]

    def read(batch):
        reads = {}
        for key in batch:
            segment, row = index[key]
            reads.setdefault(segment, []).append(row)
        for segment, rows in reads.items():
            with pa.memory_map(paths[segment], "r") as source:
                table = pa.ipc.open_file(source).read_all().take(rows)
                columns = {name: table[name].to_numpy() for name in table.column_names}
                for at in range(len(rows)):
                    {name: np.array(values[at], copy=True) for name, values in columns.items()}

    done, seconds = timed(batches, read)
    done_rows = sum(len(b) for b in batches[:done])
    return "pyarrow get_batch of 1,000 keys, torchcachex's read", (done_rows, seconds)


def hdf5_peer(cache):
    """The fastest read of stowage's generic HDF5 layout a Python user would write with h5py:
    per batch of 1,000 keys, for each segment file it touches, one slice of the `shapes` row
    dataset and of every field's variable-length dataset covering the rows it needs (first to
    last), then the rows picked out of the slices and reshaped. (Reading one row per h5py call,
    as an earlier version of this peer did, is about 100x slower: each call pays libhdf5's
    selection and variable-length conversion set-up.)"""
    import h5py
    import numpy as np

    segments_dir = os.path.join(cache["dir"], "segments")
    files, index = [], {}
    for name in sorted(n for n in os.listdir(segments_dir) if n.endswith(".h5")):
        f = h5py.File(os.path.join(segments_dir, name), "r")
        files.append(f)
        for row, key in enumerate(f["torch_cache/samples/keys"][:]):
            index[bytes(key).decode()] = (len(files) - 1, row)
    keys = cache["keys"]
    batches = [keys[i:i + BATCH] for i in range(0, len(keys), BATCH)]

    def read(batch):
        wanted = {}
        for key in batch:
            segment, row = index[key]
            wanted.setdefault(segment, []).append(row)
        for segment, rows in wanted.items():
            samples = files[segment]["torch_cache/samples"]
            first, last = min(rows), max(rows) + 1
            shapes = samples["shapes"][first:last]
            fields = samples["fields"]
            columns = [samples["fields"][str(i)][first:last] for i in range(len(fields))]
            for row in rows:
                shape, at = shapes[row - first], 0
                for column in columns:
                    rank = int(shape[at])
                    at += 1
                    if rank < 0:
                        continue
                    dims = tuple(int(d) for d in shape[at:at + rank])
                    at += rank
                    np.asarray(column[row - first]).reshape(dims)

    done, seconds = timed(batches, read)
    for f in files:
        f.close()
    done_rows = sum(len(b) for b in batches[:done])
    return ("h5py slices of each segment's rows a batch of 1,000 keys needs, then the rows "
            "picked (the fastest h5py read of this layout; stowage's own, not aenet's)",
            (done_rows, seconds))


PEERS = {"npy": npy_peer, "memmap": memmap_peer, "arrow": arrow_peer, "hdf5": hdf5_peer}

rates = []
for cache in PLAN["caches"]:
    name = cache["backend"]
    try:
        what, (done, seconds) = PEERS[name](cache)
    except ImportError as error:
        rates.append({"name": name, "missing": f"Python package missing: {error.name}"})
        continue
    rates.append({"name": name, "what": what, "rows_per_s": done / max(seconds, 1e-9),
                  "rows": done, "seconds": seconds, "batched": name in ("arrow", "hdf5")})
print(json.dumps({"rates": rates, "python": platform.python_version()}))
