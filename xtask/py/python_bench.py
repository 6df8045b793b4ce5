#!/usr/bin/env python3
"""The python suite of `cargo xtask bench`: the `stowage` Python package against its own Rust
reads, a raw copy of the same rows, and each original tool's Python read path on the same files.

Usage: python_bench.py BENCH_DIR [--rows N] [--seconds S] [--seed SEED]

Run with the interpreter of the venv the package is installed in (`maturin develop --release`);
`cargo xtask bench --suite python` builds it and runs this script. Everything is measured in this
one process, side by side.

Workload: BENCH_DIR/<backend>/ for backend in memmap, arrow, npy, hdf5, each made anew with
`stowage.create(path, backend=..., schema={"x": ("float32", [512])})`: N rows (default 131,072,
256 MiB of row bytes per cache, twice this machine's L3) of seeded random float32[512], keys
`s0000000`, `s0000001`, ... in order; memmap is finalized. Every value read back before timing
is compared with what was put (the first 2,048 keys of a shuffled order, through `get`, `get_batch`,
`get_batch_into` and each peer). Maps warm: before timing, every key of every cache is read once
through `get_batch` (and through `CacheDataset.__getitems__`, whose handle has maps of its own),
and the peers and the reference touch every page of the files they map; nothing is dropped from
the page cache. Rows not in the CPU cache: keys come from shuffled epochs over all N rows.

Measured per backend, in rounds that alternate the measurements, a different one first each
round (the machine is shared: a neighbour's load strikes every side of a round alike). Each
measurement of a round reads keys of its own, the next ones of the shuffled epochs, so none finds
rows or index entries that another one has just brought into the CPU cache. Each rate is rows per
second of the median round (rows per round / median seconds of a round), and the per-`get`
overhead is the median over rounds of (Python seconds - Rust seconds) / keys:
- get rounds, 1,024 keys: `<b>_rust_get` (the extension's `_time_rust_gets`: Rust `Reader::get`
  of each key on the same open handle, GIL released, no Python in the loop), `<b>_py_get` (a
  Python loop of `cache.get(key)`: a dict of read-only numpy arrays, checksums checked), and the
  backend's peer (memmap: DNANet's `np.array(mm[row])` per field; npy: hangar's
  slice + xxh64; hdf5: PyTables and h5py per-entry reads, 128 keys each).
- batch rounds, 8 batches of 256 keys: `<b>_rust_get_batch` (`_time_rust_get_batches`: Rust
  `get_batch` of each batch), `<b>_py_get_batch_into` (`cache.get_batch_into(keys, out)` into a
  preallocated float32 (256, 512), the same array every batch), `<b>_py_getitems` (`stowage.torch.CacheDataset.__getitems__`
  of the batch's indices: the DataLoader's call, new stacked arrays per batch, each dropped before
  the next as a training loop drops it), `<b>_py_get_batch` (`cache.get_batch(keys)`, likewise), and on memmap `reference_take_rows` (`np.take(mm, rows, axis=0,
  out=out)` from a np.memmap of memmap's x.bin: a raw copy of rows of the same file) and
  on arrow `torchcachex_get_batch` (xtask/py/torchcachex_peer.py's `ArrowIPCCacheBackend.get_batch`
  of one batch of 256 keys a round: torchcachex's read path on an LRU miss).

Prints one JSON line: {"<rate>_rows_per_s": ..., "rows": {"<rate>": ...}, "seconds": {"<rate>":
...}, "levels": {"<b>_get_overhead": {"value": microseconds, "unit": "µs"}}, "python": ...,
"numpy": ..., "stowage": ..., ...}. Exits 1 with a message when a value read back differs from
what was written. Needs numpy, pyarrow, tables, h5py, xxhash and the stowage package.
"""

import os

# numpy's OpenBLAS threads (idle here: nothing calls BLAS) would only add noise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import platform
import re
import shutil
import statistics
import sys
import time

import h5py
import numpy as np
import pyarrow as pa
import tables
import xxhash

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import memmap_peer  # noqa: E402  DNANet's np.memmap maps (pages touched)
import numpy10_peer  # noqa: E402  hangar's np.load(mmap_mode="r") maps (pages touched)
import torchcachex_peer  # noqa: E402  torchcachex's ArrowIPCCacheBackend

import stowage  # noqa: E402
import stowage._stowage as native  # noqa: E402
from stowage.torch import CacheDataset  # noqa: E402

BACKENDS = ("memmap", "arrow", "npy", "hdf5")
WIDTH = 512
GET_KEYS = 1024
HDF5_PEER_KEYS = 128
BATCH = 256
BATCHES_PER_ROUND = 8
CHECK_KEYS = 2048
WRITE_CHUNK = 4096


def fail(message):
    """Stops with exit status 1."""
    sys.exit(f"python_bench: {message}")


def key_of(i):
    return f"s{i:07d}"


def build(path, backend, data):
    """A new cache of `data`'s rows at `path`."""
    shutil.rmtree(path, ignore_errors=True)
    with stowage.create(path, backend=backend, schema={"x": ("float32", [WIDTH])}) as cache:
        for start in range(0, len(data), WRITE_CHUNK):
            stop = min(len(data), start + WRITE_CHUNK)
            cache.put_batch((key_of(i), {"x": data[i]}) for i in range(start, stop))
        if backend == "memmap":
            cache.finalize()


def check(what, got, want):
    if not np.array_equal(got, want):
        fail(f"{what}: the values read back differ from those written")


# --- the peers' read paths -----------------------------------------------------------------


def dnanet_read(fields, row):
    """DNANet's MemmapCacheReader.get_row: a copy of row `row` of every field's np.memmap."""
    return {name: np.array(mm[row]) for name, mm in fields}


def hangar_records(npy_dir):
    """{key: (uid, xxh64 hex, idx, shape)} from the NUMPY_10 records stowage-npy logged for each
    key (`10:<uid>:<xxh64>:<idx>:<dims>`, the record strings hangar keeps in its LMDB)."""
    with open(os.path.join(npy_dir, "records.log"), "rb") as log:
        text = log.read().decode("utf-8", "replace")
    records = {}
    for key, record in re.findall(r'\["([^"]+)","(10:[^"]+)"\]', text):
        _, uid, checksum, idx, dims = record.split(":", 4)
        records[key] = (uid, checksum, int(idx), tuple(int(d) for d in dims.split(" ") if d))
    return records


def hangar_read(mm, where, checksum):
    """hangar's NUMPY_10 read: the slice made contiguous, then its xxh64 compared."""
    a = np.ascontiguousarray(mm[where])
    if xxhash.xxh64_hexdigest(a.tobytes()) != checksum:
        fail("hangar's xxh64 of a record does not match")
    return a


class Hdf5Peer:
    """Per-entry reads of stowage's HDF5 segments the way aenet reads its /torch_cache: the index
    row, then the entry's rows, reshaped; through PyTables (aenet's library) or h5py."""

    def __init__(self, hdf5_dir, library):
        self.files = []
        self.where = {}
        segments = os.path.join(hdf5_dir, "segments")
        for name in sorted(os.listdir(segments)):
            if not name.endswith(".h5"):
                continue
            path = os.path.join(segments, name)
            if library == "pytables":
                f = tables.open_file(path, "r")
                section = f.root.torch_cache.samples
                nodes = (section.index, section.shapes, section.fields._f_get_child("0"))
                keys = section.keys.read()
            else:
                f = h5py.File(path, "r")
                section = f["torch_cache/samples"]
                nodes = (section["index"], section["shapes"], section["fields/0"])
                keys = section["keys"][:]
            for row, key in enumerate(keys):
                self.where[bytes(key).decode()] = (len(self.files), row)
            self.files.append((f, nodes))

    def read(self, key):
        """One entry: its index row, its shapes row, its values reshaped (a writable array)."""
        segment, row = self.where[key]
        _, (index, shapes, values) = self.files[segment]
        cache_row = int(index[row]["cache_row"])
        shape = shapes[cache_row]
        rank = int(shape[0])
        return np.asarray(values[cache_row]).reshape(tuple(int(d) for d in shape[1 : 1 + rank]))

    def close(self):
        for f, _ in self.files:
            f.close()


# --- timing ----------------------------------------------------------------------------------


def seconds_of(step):
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def each(call, items):
    """call(item) for every item, each result dropped before the next call: a training loop
    drops a batch once its step has used it. (Keeping a round's eight 512 KiB batches alive would
    make the allocator hand out fresh pages every batch, page faults the loop would not see.)"""
    for item in items:
        call(item)


class Timings:
    """Per-round seconds of each named measurement, and the rows each round reads."""

    def __init__(self):
        self.rounds = {}
        self.rows = {}

    def add(self, name, rows, seconds):
        self.rounds.setdefault(name, []).append(seconds)
        self.rows[name] = rows

    def rate(self, name):
        return self.rows[name] / statistics.median(self.rounds[name])

    def total_rows(self, name):
        return self.rows[name] * len(self.rounds[name])

    def total_seconds(self, name):
        return sum(self.rounds[name])


def epochs(n, rng):
    """Endless shuffled epochs over range(n)."""
    while True:
        yield from rng.permutation(n).tolist()


def take(order, count):
    return [next(order) for _ in range(count)]


def run_rounds(max_seconds, min_rounds, max_rounds, one_round):
    """Calls one_round(number) until max_seconds have passed (at least min_rounds times)."""
    start = time.perf_counter()
    number = 0
    while number < max_rounds and (
        number < min_rounds or time.perf_counter() - start < max_seconds
    ):
        one_round(number)
        number += 1
    return number


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--rows", type=int, default=131_072)
    parser.add_argument("--seconds", type=float, default=4.0, help="per backend and round kind")
    parser.add_argument("--seed", type=int, default=512)
    args = parser.parse_args()
    n = args.rows
    if n < CHECK_KEYS:
        parser.error(f"--rows must be at least {CHECK_KEYS}")

    os.makedirs(args.bench_dir, exist_ok=True)
    data = np.random.default_rng(args.seed).standard_normal((n, WIDTH), dtype=np.float32)
    keys = [key_of(i) for i in range(n)]
    paths = {backend: os.path.join(args.bench_dir, backend) for backend in BACKENDS}
    build_seconds = {}
    for backend in BACKENDS:
        build_seconds[backend] = seconds_of(lambda: build(paths[backend], backend, data))
        print(f"python_bench: built {paths[backend]} in {build_seconds[backend]:.1f} s",
              file=sys.stderr)

    timings = Timings()
    overheads, cpu_overhead, key_conversion = {}, {}, {}
    rng = np.random.default_rng(args.seed + 1)
    check_rows = rng.permutation(n)[:CHECK_KEYS].tolist()
    check_keys = [keys[i] for i in check_rows]

    # The peers, opened (and their maps touched) before any timing.
    _, dnanet_maps = memmap_peer.open_maps(paths["memmap"])
    dnanet_fields = list(dnanet_maps.items())
    import pyarrow.parquet as pq

    dnanet_row = {
        entry["path"]: int(entry["row"])
        for entry in pq.read_table(os.path.join(paths["memmap"], "index.parquet")).to_pylist()
    }
    records = hangar_records(paths["npy"])
    if len(records) != n:
        fail(f"{paths['npy']}/records.log names {len(records)} records, expected {n}")
    hangar_maps = numpy10_peer.open_maps(paths["npy"], {r[0] for r in records.values()})
    hangar = {
        key: (hangar_maps[uid], (idx,) + tuple(slice(0, d) for d in shape), checksum)
        for key, (uid, checksum, idx, shape) in records.items()
    }
    parent, module_id = os.path.split(os.path.abspath(paths["arrow"]))
    torchcachex = torchcachex_peer.ArrowIPCCacheBackend(parent, module_id)
    if len(torchcachex.index) != n:
        fail(f"torchcachex's index of {paths['arrow']} holds {len(torchcachex.index)} keys, not {n}")
    pytables_peer = Hdf5Peer(paths["hdf5"], "pytables")
    h5py_peer = Hdf5Peer(paths["hdf5"], "h5py")
    reference = np.memmap(os.path.join(paths["memmap"], "x.bin"), dtype=np.float32, mode="r",
                          shape=(n, WIDTH))
    int(reference.reshape(-1).view(np.uint8)[::4096].sum())  # every page touched

    # Every value the peers read is what was put.
    for key, row in zip(check_keys, check_rows):
        check(f"DNANet's read of {key}", dnanet_read(dnanet_fields, dnanet_row[key])["x"], data[row])
        check(f"hangar's read of {key}", hangar_read(*hangar[key]), data[row])
    for key, row in zip(check_keys[:256], check_rows[:256]):
        check(f"PyTables' read of {key}", pytables_peer.read(key), data[row])
        check(f"h5py's read of {key}", h5py_peer.read(key), data[row])
    results, missing = torchcachex.get_batch(check_keys)
    if missing:
        fail(f"torchcachex's get_batch misses {len(missing)} of {len(check_keys)} keys")
    for key, row, result in zip(check_keys, check_rows, results):
        check(f"torchcachex's read of {key}", result["x"], data[row])

    for backend in BACKENDS:
        cache = stowage.open(paths[backend])
        if not cache.checks:
            fail(f"{paths[backend]} opened without checksum checks")
        # Maps warm: every key read once.
        for start in range(0, n, 4096):
            cache.get_batch(keys[start : start + 4096])
        for key, row in zip(check_keys, check_rows):
            got = cache.get(key)["x"]
            if got.flags.writeable:
                fail(f"{backend}: get returned a writable array")
            check(f"{backend} get of {key}", got, data[row])
        check(f"{backend} get_batch", cache.get_batch(check_keys[:BATCH])["x"],
              data[check_rows[:BATCH]])
        out = {"x": np.empty((BATCH, WIDTH), np.float32)}
        cache.get_batch_into(check_keys[:BATCH], out)
        check(f"{backend} get_batch_into", out["x"], data[check_rows[:BATCH]])
        # CacheDataset opens its own handle (its own maps): warmed the same way.
        dataset = CacheDataset(paths[backend], keys=keys)
        for start in range(0, n, 4096):
            dataset.__getitems__(range(start, min(n, start + 4096)))
        check(f"{backend} CacheDataset.__getitems__", dataset.__getitems__(check_rows[:BATCH])["x"],
              data[check_rows[:BATCH]])
        order = epochs(n, rng)
        get = cache.get
        names = {s: f"{backend}_{s}" for s in ("rust_get", "py_get", "rust_get_batch",
                                                "py_get_batch_into", "py_getitems", "py_get_batch")}
        round_overheads, cpu_overheads, conversions = [], [], []

        def get_round(number):
            # Each measurement reads keys of its own, the next ones of the shuffled epochs, so
            # none finds rows or index entries that another one of the round has just brought
            # into the CPU cache; a different one goes first each round.
            def fresh_keys(count=GET_KEYS):
                return [keys[i] for i in take(order, count)]

            measured = {}

            def rust():
                round_keys = fresh_keys()
                cpu, wall = time.thread_time(), time.perf_counter()
                inside = native._time_rust_gets(cache, round_keys)
                measured["rust"] = inside, time.perf_counter() - wall, time.thread_time() - cpu

            def python():
                round_keys = fresh_keys()
                cpu, wall = time.thread_time(), time.perf_counter()
                for k in round_keys:
                    get(k)
                measured["python"] = time.perf_counter() - wall, time.thread_time() - cpu

            steps = [rust, python]
            if backend == "memmap":
                def dnanet():
                    peer_rows = [dnanet_row[k] for k in fresh_keys()]

                    def reads():
                        for r in peer_rows:
                            dnanet_read(dnanet_fields, r)

                    timings.add("dnanet_memmap_copy", GET_KEYS, seconds_of(reads))

                steps.append(dnanet)
            elif backend == "npy":
                def hangar_peer():
                    reads = [hangar[k] for k in fresh_keys()]

                    def hangar_loop():
                        for mm, where, checksum in reads:
                            hangar_read(mm, where, checksum)

                    timings.add("hangar_slice_xxh64", GET_KEYS, seconds_of(hangar_loop))

                steps.append(hangar_peer)
            elif backend == "hdf5":
                for name, peer in (("pytables_per_entry", pytables_peer),
                                   ("h5py_per_entry", h5py_peer)):
                    def entries_of(name=name, read=peer.read):
                        few = fresh_keys(HDF5_PEER_KEYS)

                        def entries():
                            for k in few:
                                read(k)

                        timings.add(name, len(few), seconds_of(entries))

                    steps.append(entries_of)
            shift = number % len(steps)
            for step in steps[shift:] + steps[:shift]:
                step()
            (t_rust, t_call, c_rust), (t_python, c_python) = measured["rust"], measured["python"]
            timings.add(names["rust_get"], GET_KEYS, t_rust)
            timings.add(names["py_get"], GET_KEYS, t_python)
            round_overheads.append((t_python - t_rust) / GET_KEYS)
            # Diagnostics: thread CPU time (what a neighbour's load does not add: time this
            # thread waited for a core), and the keys' conversion the Rust call makes before
            # its clock starts (call wall time minus its own time).
            cpu_overheads.append((c_python - c_rust) / GET_KEYS)
            conversions.append((t_call - t_rust) / GET_KEYS)

        get_rounds = run_rounds(args.seconds, 5, 10_000, get_round)
        overheads[backend] = statistics.median(round_overheads)
        cpu_overhead[backend] = statistics.median(cpu_overheads)
        key_conversion[backend] = statistics.median(conversions)

        # One preallocated array, reused batch after batch, as a training loop does.
        out = np.empty((BATCH, WIDTH), np.float32)
        rows_per_round = BATCH * BATCHES_PER_ROUND

        def batch_round(number):
            # As in get rounds: rows of its own for each measurement, a different one first.
            def fresh_rows(batches):
                return [take(order, BATCH) for _ in range(batches)]

            def key_batches(rows):
                return [[keys[i] for i in batch] for batch in rows]

            def timed(call_on_batches, rows_of=key_batches, batches=BATCHES_PER_ROUND):
                taken = rows_of(fresh_rows(batches))
                return lambda: call_on_batches(taken)

            steps = [
                (names["rust_get_batch"],
                 timed(lambda batches: native._time_rust_get_batches(cache, batches))),
                # Diagnostic: the same call timed from Python (with the keys' conversion).
                (f"{backend}_rust_get_batch_call", timed(lambda batches: seconds_of(
                    lambda: native._time_rust_get_batches(cache, batches)))),
                # Diagnostic: get_batch_into into a new np.empty array per batch, as
                # __getitems__ does, without its Python code.
                (f"{backend}_py_get_batch_into_new", timed(lambda batches: seconds_of(
                    lambda: each(lambda b: cache.get_batch_into(
                        b, {"x": np.empty((BATCH, WIDTH), np.float32)}), batches)))),
                (names["py_get_batch_into"], timed(lambda batches: seconds_of(
                    lambda: each(lambda b: cache.get_batch_into(b, {"x": out}), batches)))),
                (names["py_getitems"], timed(lambda rows: seconds_of(
                    lambda: each(dataset.__getitems__, rows)), rows_of=lambda rows: rows)),
                (names["py_get_batch"], timed(lambda batches: seconds_of(
                    lambda: each(cache.get_batch, batches)))),
            ]
            if backend == "memmap":
                steps.append(("reference_take_rows", timed(lambda indices: seconds_of(lambda: [
                    np.take(reference, i, axis=0, out=out) for i in indices]),
                    rows_of=lambda rows: [np.array(r, dtype=np.intp) for r in rows])))
            if backend == "arrow":
                # One batch a round (only that one is taken from the epoch): torchcachex reads
                # ~4k rows/s.
                steps.append(("torchcachex_get_batch", timed(lambda batches: seconds_of(
                    lambda: torchcachex.get_batch(batches[0])), batches=1)))
            shift = number % len(steps)
            for name, step in steps[shift:] + steps[:shift]:
                count = BATCH if name == "torchcachex_get_batch" else rows_per_round
                timings.add(name, count, step())

        batch_rounds = run_rounds(args.seconds, 5, 10_000, batch_round)
        print(f"python_bench: {backend}: {get_rounds} get rounds, {batch_rounds} batch rounds",
              file=sys.stderr)
        cache.close()
    pytables_peer.close()
    h5py_peer.close()

    result = {f"{name}_rows_per_s": timings.rate(name) for name in timings.rounds}
    result.update(
        {
            "rows": {name: timings.total_rows(name) for name in timings.rounds},
            "seconds": {name: timings.total_seconds(name) for name in timings.rounds},
            "rounds": {name: len(seconds) for name, seconds in timings.rounds.items()},
            "levels": {
                **{
                    f"{backend}_get_overhead": {"value": overhead * 1e6, "unit": "µs"}
                    for backend, overhead in overheads.items()
                },
                **{
                    f"{backend}_get_overhead_cpu": {"value": overhead * 1e6, "unit": "µs"}
                    for backend, overhead in cpu_overhead.items()
                },
                **{
                    f"{backend}_key_conversion": {"value": seconds * 1e6, "unit": "µs"}
                    for backend, seconds in key_conversion.items()
                },
            },
            "rust_get_us": {b: 1e6 / timings.rate(f"{b}_rust_get") for b in BACKENDS},
            "py_get_us": {b: 1e6 / timings.rate(f"{b}_py_get") for b in BACKENDS},
            "build_seconds": build_seconds,
            "n": n,
            "width": WIDTH,
            "seed": args.seed,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
            "tables": tables.__version__,
            "h5py": h5py.__version__,
            "xxhash": xxhash.VERSION,
            "stowage": stowage.__version__,
            "stowage_module": native.__file__,
        }
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
