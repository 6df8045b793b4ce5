#!/usr/bin/env python3
"""Python peer of the hdf5 benchmark: aenet's PyTables loads and writes on the same file.

Usage: hdf5_peer.py BENCH_DIR [--max-seconds S] [--seed SEED]

BENCH_DIR is the directory the criterion bench leaves behind (STOWAGE_BENCH_DIR), holding
dataset.h5 (a v2 /torch_cache stowage wrote: float64 features for every entry, derivatives for
every `forces_every`-th entry) and workload.json ({"entries", "forces_every", "build_entries",
...}).

Measured, each until --max-seconds have passed (entries in shuffled order, fixed seed):
- pytables_load_features: aenet's feature load of one entry,
      row = features.index[entry]; features.values[row["cache_row"]].reshape(n_atoms, n_features)
- pytables_load_entry: the same plus aenet's derivative load of an entry with forces (its index row,
  then the 11 VLEN rows reshaped by the index counts);
- pytables_build: writing the first build_entries entries' payloads (read before timing) into a
  new file as aenet's writer does: built under a temporary name beside the target (VLArrays and
  index Tables with shuffle + deflate 5, one append per row, then the attributes), then renamed
  over it; repeated until --max-seconds (removing the previous build is not timed);
- pytables_build_fsync: the same, with the file and its directory fsynced around the rename, the
  durability stowage's writer gives (its build_cache fsyncs): the like-for-like rate for it.

Prints one JSON line:
    {"pytables_load_features_rows_per_s": ..., "pytables_load_entry_rows_per_s": ...,
     "pytables_build_rows_per_s": ..., "pytables_build_fsync_rows_per_s": ..., "rows": {...},
     "seconds": {...}, "python": ..., "tables": ...}

Exits 1 with a message naming the file when dataset.h5 or workload.json is missing.
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import tables

RADIAL = ("center_idx", "neighbor_idx", "dG_drij", "neighbor_typespin")
ANGULAR = ("center_idx", "neighbor_j_idx", "neighbor_k_idx", "grads_i", "grads_j", "grads_k",
           "triplet_typespin")


def fail(message):
    """Stops with exit status 1."""
    sys.exit(f"hdf5_peer: {message}")


def load_features(f, entry):
    """aenet's feature load."""
    section = f.root.torch_cache.features
    row = section.index[entry]
    values = section.values[int(row["cache_row"])]
    return np.asarray(values).reshape(int(row["n_atoms"]), int(row["n_features"]))


def load_derivatives(f, cache_row, n_radial, n_angular, multi):
    """aenet's derivative load: the index row, then the 11 VLEN rows reshaped."""
    section = f.root.torch_cache.force_derivatives
    row = section.index[cache_row]
    r, e, t = int(row["cache_row"]), int(row["n_radial_edges"]), int(row["n_angular_triplets"])
    out = {}
    for name in RADIAL:
        values = np.asarray(getattr(section.radial, name)[r])
        if name == "dG_drij":
            values = values.reshape(e, n_radial, 3)
        if name != "neighbor_typespin" or multi:
            out["radial/" + name] = values
    for name in ANGULAR:
        values = np.asarray(getattr(section.angular, name)[r])
        if name.startswith("grads"):
            values = values.reshape(t, n_angular, 3)
        if name != "triplet_typespin" or multi:
            out["angular/" + name] = values
    return out


def timed(order, step, max_seconds):
    """(entries done, seconds): `step(entry)` over `order` until it ends or time is up."""
    done = 0
    start = time.perf_counter()
    for entry in order:
        step(entry)
        done += 1
        if done % 64 == 0 and time.perf_counter() - start >= max_seconds:
            break
    return done, time.perf_counter() - start


def build(target, payloads, attrs, durable):
    """Writes the payloads as aenet's PyTables writer does, under a temporary name renamed over
    `target`; `durable` fsyncs the file before and the directory after the rename."""
    path = target + ".tmp"
    filters = tables.Filters(complevel=5, complib="zlib", shuffle=True)
    with tables.open_file(path, "w") as f:
        cache = f.create_group("/", "torch_cache")
        feat = f.create_group(cache, "features")
        fvalues = f.create_vlarray(feat, "values", tables.Float64Atom(), filters=filters)
        findex = f.create_table(feat, "index", {
            "cache_row": tables.Int64Col(pos=0), "entry_idx": tables.Int64Col(pos=1),
            "n_atoms": tables.Int32Col(pos=2), "n_features": tables.Int32Col(pos=3)},
            filters=filters)
        deriv = f.create_group(cache, "force_derivatives")
        groups = {"radial": f.create_group(deriv, "radial"),
                  "angular": f.create_group(deriv, "angular")}
        arrays = {}
        for group, names in (("radial", RADIAL), ("angular", ANGULAR)):
            for name in names:
                atom = tables.Int64Atom() if name.endswith("_idx") else tables.Float64Atom()
                arrays[group + "/" + name] = f.create_vlarray(groups[group], name, atom,
                                                              filters=filters)
        dindex = f.create_table(deriv, "index", {
            "cache_row": tables.Int64Col(pos=0), "entry_idx": tables.Int64Col(pos=1),
            "n_angular_triplets": tables.Int32Col(pos=2), "n_atoms": tables.Int32Col(pos=3),
            "n_radial_edges": tables.Int32Col(pos=4)}, filters=filters)
        drow = 0
        for entry, (features, derivatives) in enumerate(payloads):
            fvalues.append(features.reshape(-1))
            findex.append([(entry, entry, features.shape[0], features.shape[1])])
            if derivatives is not None:
                for name, values in derivatives.items():
                    arrays[name].append(values.reshape(-1))
                e = len(derivatives["radial/center_idx"])
                t = len(derivatives["angular/center_idx"])
                dindex.append([(drow, entry, t, features.shape[0], e)])
                drow += 1
        for name, value in attrs.items():
            setattr(cache._v_attrs, name, value)
        f.flush()
    if durable:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    os.replace(path, target)
    if durable:
        fd = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def timed_builds(target, payloads, attrs, durable, max_seconds):
    """(entries built, seconds): whole builds until max_seconds have passed (at least one); the
    previous build is removed outside the timing."""
    done, took = 0, 0.0
    while done == 0 or took < max_seconds:
        if os.path.exists(target):
            os.remove(target)
        start = time.perf_counter()
        build(target, payloads, attrs, durable)
        took += time.perf_counter() - start
        done += len(payloads)
    os.remove(target)
    return done, took


def main():
    """Measures the three rates and prints the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--max-seconds", type=float, default=3.0, help="per rate")
    parser.add_argument("--seed", type=int, default=64)
    args = parser.parse_args()
    path = os.path.join(args.bench_dir, "dataset.h5")
    workload_path = os.path.join(args.bench_dir, "workload.json")
    for needed in (path, workload_path):
        if not os.path.isfile(needed):
            fail(f"{needed} does not exist (the hdf5 benchmark leaves it behind)")
    with open(workload_path, encoding="utf-8") as text:
        workload = json.load(text)
    entries, every = int(workload["entries"]), int(workload["forces_every"])
    rng = np.random.default_rng(args.seed)
    rates, rows, seconds = {}, {}, {}
    with tables.open_file(path, "r") as f:
        dattrs = f.root.torch_cache.force_derivatives._v_attrs
        n_radial, n_angular = int(dattrs.n_radial_features), int(dattrs.n_angular_features)
        multi = bool(dattrs.multi)
        # Warm the page cache as the Rust bench does.
        for entry in rng.permutation(entries)[:2000].tolist():
            load_features(f, entry)
        order = rng.permutation(entries).tolist() * 4
        done, took = timed(order, lambda entry: load_features(f, entry), args.max_seconds)
        rates["pytables_load_features"], rows["features"], seconds["features"] = done / took, done, took
        with_forces = entries // every + (1 if entries % every else 0)
        order = rng.permutation(with_forces).tolist() * 4

        def load_entry(cache_row):
            load_features(f, cache_row * every)
            load_derivatives(f, cache_row, n_radial, n_angular, multi)

        done, took = timed(order, load_entry, args.max_seconds)
        rates["pytables_load_entry"], rows["entry"], seconds["entry"] = done / took, done, took
        count = int(workload["build_entries"])
        payloads = []
        for entry in range(count):
            derivatives = None
            if entry % every == 0:
                derivatives = load_derivatives(f, entry // every, n_radial, n_angular, True)
            payloads.append((load_features(f, entry), derivatives))
        attrs = {name: f.root.torch_cache._v_attrs[name]
                 for name in f.root.torch_cache._v_attrs._f_list("user")}
    target = os.path.join(args.bench_dir, "pytables_build.h5")
    for name, durable in (("build", False), ("build_fsync", True)):
        done, took = timed_builds(target, payloads, attrs, durable, args.max_seconds)
        rates["pytables_" + name], rows[name], seconds[name] = done / took, done, took
    result = {f"{name}_rows_per_s": rate for name, rate in rates.items()}
    result.update({"rows": rows, "seconds": seconds, "entries": entries,
                   "python": platform.python_version(), "numpy": np.__version__,
                   "tables": tables.__version__})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
