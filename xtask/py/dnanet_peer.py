#!/usr/bin/env python3
"""Python peer of DNANet's memmap cache: its writer, reader, fingerprint check and inspect tool.

Usage: dnanet_peer.py COMMAND, with one JSON object on stdin and one JSON object on stdout.

DNANet is not on the package index, so the mixed-writer tests (stowage-memmap's
tests/mixed_dnanet.rs) run this peer where DNANet would run. It reproduces, in code of its own, the
behaviour of DNANet's `dnanet.data.cache` modules at the stored versions the reference sets were
written with (../shared/reference/README.md, section dnanet-memmap):

- layout.py @111959c (CACHE_VERSION = 5): the file names; is_complete, mark_complete (touch),
  clear_complete (unlink when present).
- writer.py @8c203bd, MemmapCacheWriter:
  - __init__: creates the directory, clears _COMPLETE, then _recover_from_manifest: reads
    manifest.jsonl line by line (stripped, blank lines skipped), stops at the first line that does
    not parse, takes the row shapes from the first row, the row count and resume_paths from the
    rows read, cuts (or extends: `truncate` pads) each of data.bin, annotation.bin, scaler.bin that
    exists to row_count * row_bytes when its size differs, and rewrites manifest.jsonl in place
    ('w' mode) with json.dumps(row) + '\\n' for every row kept. Without a manifest, or with no row
    in it, nothing happens (the .bin files are appended to as they are: DNANet's stale-rows defect,
    reproduced).
  - write: data as int16, scaler as float32, annotation as int8 or, when absent, zeros of the data's
    shape; shapes locked by the first row (of this session or of the manifest) and checked after;
    the three rows appended ('ab') and flushed, then the manifest line, in DNANet's key order: row,
    path, data_shape, ann_shape, scaler_shape, has_annotation, allele_annotation_json,
    adjusted_panel_json, meta_json; json.dumps, newline, flushed.
  - finalize: refuses an empty cache; _build_index_and_sidecars: re-reads the manifest, interns
    adjusted_panel_json / allele_annotation_json in first-seen order, writes panels.json and
    alleles.json (json.dumps of {str(key): text}), then index.parquet (row int64, path string,
    has_annotation bool, panel_key int32, allele_key int32, meta_json string; snappy) with pyarrow;
    _write_shapes_json (json.dumps(indent=2), dtypes '<i2', '|i1', '<f4'); write_fingerprint; the
    manifest unlinked; _COMPLETE touched.
- reader.py @8c203bd, MemmapCacheReader: shapes.json for n, shapes and dtypes; load_index
  (pq.read_table(...).to_pylist(), has_annotation defaulting to True); get_row(idx) (negative from
  the end, IndexError out of range) as copies of np.memmap rows of (n, *shape); panel_json /
  allele_json through the sidecars ({int(k): v}, .get, None for a None key).
- fingerprint.py variant A @e2b5b43: _source_stamps ({path, mtime_ns, size} from stat, both None
  for a missing file, sorted by path), compute_fingerprint (sha256 of json.dumps({'config',
  'sources'}, sort_keys=True)), write_fingerprint (json.dumps(indent=2)), read_fingerprint (None
  when missing or not JSON) and validate_fingerprint (stored 'hash' equal to the recomputed one).
- inspect.py @6aef491: main / _inspect_one, the printed report, for one cache directory or a parent
  of several.

Departures from DNANet, none of which changes a byte DNANet writes:
- Rows come as JSON, not as HIDImage objects: `data` and `annotation` as flat lists of integers
  with `data_shape`, `scaler_bits` as the float32 bit patterns (so NaN payloads survive JSON), and
  the panel, allele-annotation and meta JSON texts given directly, where DNANet computes them with
  json.dumps([m.to_dict() ...]) and json.dumps(image.meta, default=str).
- Messages go to stderr instead of loguru.
- The `read` command also reads an unfinished cache, which DNANet's reader cannot (it needs
  shapes.json): it returns what the writer's recovery keeps (the manifest's rows, stopping at the
  first line that does not parse, their bytes sliced from the .bin files), without changing a file,
  and what finalize would index for them.
- A `None` annotation for rows with has_annotation false is what DNANet's dataset makes of them; the
  stored zero row is returned beside it (`annotation_row`).

Commands (stdin -> stdout):
- write: {"cache": DIR, "rows": [ROW...],
         "finalize": null | {"config": {...}, "sources": [PATH...]}}
  -> {"resume_paths": [...sorted], "recovered_rows": N, "written": K, "finalized": bool}.
  ROW: {"path", "data": [int...], "data_shape": [D, L], "annotation": [int...] | null,
  "scaler_bits": [uint32...], "scaler_shape": [L], "panel": str | null, "allele": str | null,
  "meta_json": str}.
- read: {"cache": DIR} -> {"complete": bool, "n": N, "rows": [{"row", "path", "has_annotation",
  "panel_key", "allele_key", "data", "annotation", "annotation_row", "scaler_bits", "panel",
  "allele", "meta_json"}...]}.
- validate_fingerprint: {"cache": DIR, "config": {...}, "sources": [PATH...]} -> {"valid": bool}.
- inspect: {"cache": DIR} -> {"rc": int, "stdout": str}.

Needs numpy and pyarrow.
"""

import contextlib
import hashlib
import io
import json
import os
import pathlib
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CACHE_VERSION = 5
COMPLETE = "_COMPLETE"
BINS = (("data.bin", np.int16), ("annotation.bin", np.int8), ("scaler.bin", np.float32))
INDEX = "index.parquet"
SHAPES = "shapes.json"
FINGERPRINT = "fingerprint.json"
MANIFEST = "manifest.jsonl"
PANELS = "panels.json"
ALLELES = "alleles.json"


def log(message):
    print(f"dnanet_peer: {message}", file=sys.stderr)


# -- layout ---------------------------------------------------------------------------------------


def is_complete(cache):
    return os.path.exists(os.path.join(cache, COMPLETE))


def mark_complete(cache):
    # Path.touch: creates the file, or only updates its times when it exists.
    with open(os.path.join(cache, COMPLETE), "a"):
        pass
    os.utime(os.path.join(cache, COMPLETE))


def clear_complete(cache):
    path = os.path.join(cache, COMPLETE)
    if os.path.exists(path):
        os.unlink(path)


# -- fingerprint (variant A) ----------------------------------------------------------------------


def source_stamps(paths):
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append({"path": str(path), "mtime_ns": st.st_mtime_ns, "size": st.st_size})
        except FileNotFoundError:
            stamps.append({"path": str(path), "mtime_ns": None, "size": None})
    return sorted(stamps, key=lambda stamp: stamp["path"])


def compute_fingerprint(config, paths):
    stamps = source_stamps(paths)
    digest = hashlib.sha256(
        json.dumps({"config": config, "sources": stamps}, sort_keys=True).encode()
    ).hexdigest()
    return {"cache_version": CACHE_VERSION, "hash": digest, "config": config, "sources": stamps}


def read_fingerprint(cache):
    path = os.path.join(cache, FINGERPRINT)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.loads(f.read())
    except json.JSONDecodeError:
        return None


def validate_fingerprint(cache, config, paths):
    stored = read_fingerprint(cache)
    if stored is None:
        return False
    return stored.get("hash") == compute_fingerprint(config, paths)["hash"]


# -- writer ---------------------------------------------------------------------------------------


def manifest_rows(cache):
    """The rows DNANet's recovery keeps: every parsed line up to the first that does not parse."""
    rows = []
    with open(os.path.join(cache, MANIFEST)) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def row_bytes(shape, dtype):
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


class Writer:
    """MemmapCacheWriter's behaviour over one cache directory."""

    def __init__(self, cache):
        self.cache = cache
        os.makedirs(cache, exist_ok=True)
        clear_complete(cache)
        self.shapes = None  # (data, annotation, scaler) row shapes
        self.count = 0
        self.resume = set()
        self.files = None
        self.recover()

    def recover(self):
        if not os.path.exists(os.path.join(self.cache, MANIFEST)):
            return
        rows = manifest_rows(self.cache)
        if not rows:
            return
        first = rows[0]
        self.shapes = tuple(
            tuple(first[key]) for key in ("data_shape", "ann_shape", "scaler_shape")
        )
        self.count = len(rows)
        self.resume = {row["path"] for row in rows}
        for (name, dtype), shape in zip(BINS, self.shapes):
            path = os.path.join(self.cache, name)
            if not os.path.exists(path):
                continue
            size = self.count * row_bytes(shape, dtype)
            if os.stat(path).st_size != size:
                with open(path, "r+b") as f:
                    f.truncate(size)
        # Rewritten in place, as DNANet does (not through a temporary file).
        with open(os.path.join(self.cache, MANIFEST), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        log(f"resume: {self.count} rows already written in {self.cache}")

    def write(self, row):
        data = np.ascontiguousarray(
            np.array(row["data"], dtype=np.int64).reshape(row["data_shape"]), dtype=np.int16
        )
        scaler = np.array(row["scaler_bits"], dtype=np.uint32).view(np.float32)
        scaler = np.ascontiguousarray(scaler.reshape(row["scaler_shape"]), dtype=np.float32)
        has_annotation = row["annotation"] is not None
        if has_annotation:
            annotation = np.ascontiguousarray(
                np.array(row["annotation"], dtype=np.int64).reshape(row["data_shape"]),
                dtype=np.int8,
            )
        else:
            annotation = np.zeros(data.shape, dtype=np.int8)
        shapes = (data.shape, annotation.shape, scaler.shape)
        if self.shapes is None:
            self.shapes = shapes
        else:
            for name, got, want in zip(("data", "annotation", "scaler"), shapes, self.shapes):
                if tuple(got) != tuple(want):
                    raise RuntimeError(
                        f"{name} shape {got} != expected {want} for {row['path']}"
                    )
        if self.files is None:
            self.files = [open(os.path.join(self.cache, name), "ab") for name, _ in BINS]
            self.files.append(open(os.path.join(self.cache, MANIFEST), "a"))
        for f, array in zip(self.files, (data, annotation, scaler)):
            f.write(array.tobytes())
        for f in self.files[:3]:
            f.flush()
        line = {
            "row": self.count,
            "path": str(row["path"]),
            "data_shape": list(self.shapes[0]),
            "ann_shape": list(self.shapes[1]),
            "scaler_shape": list(self.shapes[2]),
            "has_annotation": has_annotation,
            "allele_annotation_json": row["allele"],
            "adjusted_panel_json": row["panel"],
            "meta_json": row["meta_json"],
        }
        self.files[3].write(json.dumps(line) + "\n")
        self.files[3].flush()
        self.count += 1

    def close(self):
        for f in self.files or []:
            f.close()
        self.files = None

    def finalize(self, config, sources):
        self.close()
        if self.count == 0:
            raise ValueError(f"Cannot finalize empty cache at {self.cache}")
        self.build_index_and_sidecars()
        data, annotation, scaler = self.shapes
        shapes = {
            "n": self.count,
            "data": {"shape": list(data), "dtype": np.dtype(np.int16).str},
            "annotation": {"shape": list(annotation), "dtype": np.dtype(np.int8).str},
            "scaler": {"shape": list(scaler), "dtype": np.dtype(np.float32).str},
        }
        write_text(os.path.join(self.cache, SHAPES), json.dumps(shapes, indent=2))
        fingerprint = compute_fingerprint(config, sources)
        write_text(os.path.join(self.cache, FINGERPRINT), json.dumps(fingerprint, indent=2))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.cache, MANIFEST))
        mark_complete(self.cache)

    def build_index_and_sidecars(self):
        panels, alleles = {}, {}
        columns = {name: [] for name in ("row", "path", "has_annotation", "panel_key",
                                         "allele_key", "meta_json")}

        def intern(text, table):
            if text is None:
                return None
            return table.setdefault(text, len(table))

        with open(os.path.join(self.cache, MANIFEST)) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                row = json.loads(line)
                columns["row"].append(int(row["row"]))
                columns["path"].append(str(row["path"]))
                columns["has_annotation"].append(bool(row.get("has_annotation", True)))
                columns["panel_key"].append(intern(row.get("adjusted_panel_json"), panels))
                columns["allele_key"].append(intern(row.get("allele_annotation_json"), alleles))
                columns["meta_json"].append(row.get("meta_json"))
        for name, table in ((PANELS, panels), (ALLELES, alleles)):
            inverse = {str(key): text for text, key in table.items()}
            write_text(os.path.join(self.cache, name), json.dumps(inverse))
        schema = pa.schema([
            pa.field("row", pa.int64()),
            pa.field("path", pa.string()),
            pa.field("has_annotation", pa.bool_()),
            pa.field("panel_key", pa.int32()),
            pa.field("allele_key", pa.int32()),
            pa.field("meta_json", pa.string()),
        ])
        table = pa.table(columns, schema=schema)
        pq.write_table(table, os.path.join(self.cache, INDEX), compression="snappy")


def write_text(path, text):
    # Path.write_text: opened with 'w' (truncated), no fsync, no temporary file.
    with open(path, "w") as f:
        f.write(text)


# -- reader ---------------------------------------------------------------------------------------


def sidecar(cache, name):
    with open(os.path.join(cache, name)) as f:
        return {int(key): text for key, text in json.loads(f.read()).items()}


def lookup(table, key):
    return None if key is None else table.get(int(key))


def read_finished(cache):
    """MemmapCacheReader over a finished cache: every row by get_row, texts through the sidecars."""
    with open(os.path.join(cache, SHAPES)) as f:
        shapes = json.loads(f.read())
    n = int(shapes["n"])
    maps = []
    for (name, _), field in zip(BINS, ("data", "annotation", "scaler")):
        shape = tuple(shapes[field]["shape"])
        dtype = np.dtype(shapes[field]["dtype"])
        maps.append(np.memmap(os.path.join(cache, name), dtype=dtype, mode="r", shape=(n,) + shape))
    index = pq.read_table(os.path.join(cache, INDEX)).to_pylist()
    panels, alleles = None, None
    rows = []
    for entry in index:
        row = int(entry["row"])
        if not -n <= row < n:
            raise IndexError(f"row {row} out of range for cache with {n} rows")
        data, annotation, scaler = (np.asarray(m[row]).copy() for m in maps)
        panel_key, allele_key = entry.get("panel_key"), entry.get("allele_key")
        if panel_key is not None and panels is None:
            panels = sidecar(cache, PANELS)
        if allele_key is not None and alleles is None:
            alleles = sidecar(cache, ALLELES)
        rows.append(describe(
            row, str(entry["path"]), bool(entry.get("has_annotation", True)), panel_key,
            allele_key, (data, annotation, scaler), lookup(panels or {}, panel_key),
            lookup(alleles or {}, allele_key), entry.get("meta_json"),
        ))
    return {"complete": is_complete(cache), "n": n, "rows": rows}


def read_unfinished(cache):
    """What the writer's recovery keeps of an unfinished cache, read without changing a file."""
    rows = manifest_rows(cache) if os.path.exists(os.path.join(cache, MANIFEST)) else []
    out = []
    if rows:
        first = rows[0]
        shapes = [tuple(first[key]) for key in ("data_shape", "ann_shape", "scaler_shape")]
        maps = []
        for (name, dtype), shape in zip(BINS, shapes):
            maps.append(np.memmap(os.path.join(cache, name), dtype=dtype, mode="r",
                                  shape=(len(rows),) + shape))
        for i, entry in enumerate(rows):
            arrays = tuple(np.asarray(m[i]).copy() for m in maps)
            out.append(describe(
                int(entry["row"]), str(entry["path"]), bool(entry.get("has_annotation", True)),
                None, None, arrays, entry.get("adjusted_panel_json"),
                entry.get("allele_annotation_json"), entry.get("meta_json"),
            ))
    return {"complete": is_complete(cache), "n": len(rows), "rows": out}


def describe(row, path, has_annotation, panel_key, allele_key, arrays, panel, allele, meta):
    data, annotation, scaler = arrays
    return {
        "row": row,
        "path": path,
        "has_annotation": has_annotation,
        "panel_key": panel_key,
        "allele_key": allele_key,
        "data": data.astype(np.int64).ravel().tolist(),
        "annotation": annotation.astype(np.int64).ravel().tolist() if has_annotation else None,
        "annotation_row": annotation.astype(np.int64).ravel().tolist(),
        "scaler_bits": scaler.view(np.uint32).ravel().tolist(),
        "panel": panel,
        "allele": allele,
        "meta_json": meta,
    }


# -- inspect --------------------------------------------------------------------------------------


def inspect_one(cache, out):
    print(f"\n=== {cache} ===", file=out)
    if not os.path.isdir(cache):
        print("  (not a directory)", file=out)
        return
    print(f"  complete marker:  {is_complete(cache)}", file=out)
    shapes_path = os.path.join(cache, SHAPES)
    if os.path.exists(shapes_path):
        with open(shapes_path) as f:
            n = json.loads(f.read()).get("n", 0)
        print(f"  rows (n):         {n}", file=out)
    names = [name for name, _ in BINS] + [INDEX, PANELS, ALLELES, SHAPES, FINGERPRINT]
    sizes = {}
    for name in names:
        path = os.path.join(cache, name)
        sizes[name] = os.stat(path).st_size if os.path.exists(path) else 0
    print("  on-disk:", file=out)
    for name, size in sizes.items():
        print(f"    {name:<20}  {size / 1e6:>8.2f} MB", file=out)
    print(f"    {'TOTAL':<20}  {sum(sizes.values()) / 1e6:>8.2f} MB", file=out)
    index_path = os.path.join(cache, INDEX)
    if not os.path.exists(index_path):
        return
    table = pq.read_table(index_path)
    n = table.num_rows
    columns = table.schema.names
    print(f"  index columns:    {columns}", file=out)
    print("  index in-RAM (string columns, approx):", file=out)
    rows = table.to_pylist()
    total = 0
    for column in columns:
        size = sum(len(r[column]) for r in rows if isinstance(r.get(column), str) and r.get(column))
        if size:
            print(f"    {column:<20}  {size / 1e6:>8.2f} MB", file=out)
            total += size
    print(f"    {'STRING TOTAL':<20}  {total / 1e6:>8.2f} MB", file=out)
    for name, label in ((PANELS, "panels.json:      "), (ALLELES, "alleles.json:     ")):
        path = os.path.join(cache, name)
        if os.path.exists(path):
            with open(path) as f:
                entries = json.loads(f.read())
            lengths = [len(text) for text in entries.values()]
            if lengths:
                print(f"  {label}{len(entries)} unique (avg={sum(lengths) // max(len(lengths), 1)}"
                      f" B, max={max(lengths)} B)", file=out)
    with open(shapes_path) as f:
        shapes = json.loads(f.read())
    per_sample = sum(row_bytes(shapes[field]["shape"], shapes[field]["dtype"])
                     for field in ("data", "annotation", "scaler"))
    print(f"  memmap realize:   {per_sample * n / 1e9:>6.2f} GB if load_in_memory=True "
          f"({per_sample} B/sample)", file=out)


def inspect(cache):
    root = pathlib.Path(cache)
    out = io.StringIO()
    if not root.exists():
        return {"rc": 1, "stdout": ""}
    if any((root / m).exists() for m in (SHAPES, INDEX, FINGERPRINT)):
        inspect_one(str(root), out)
    else:
        subdirs = sorted(p for p in root.iterdir() if p.is_dir())
        for d in subdirs or [root]:
            inspect_one(str(d), out)
    return {"rc": 0, "stdout": out.getvalue()}


# -- command line ---------------------------------------------------------------------------------


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: dnanet_peer.py write|read|validate_fingerprint|inspect < request.json")
    command, request = argv[1], json.load(sys.stdin)
    cache = request["cache"]
    if command == "write":
        writer = Writer(cache)
        recovered, resume = writer.count, sorted(writer.resume)
        for row in request["rows"]:
            writer.write(row)
        finalize = request.get("finalize")
        if finalize is not None:
            writer.finalize(finalize["config"], finalize["sources"])
        writer.close()
        reply = {"resume_paths": resume, "recovered_rows": recovered,
                 "written": len(request["rows"]), "finalized": finalize is not None}
    elif command == "read":
        if os.path.exists(os.path.join(cache, SHAPES)):
            reply = read_finished(cache)
        else:
            reply = read_unfinished(cache)
    elif command == "validate_fingerprint":
        reply = {"valid": validate_fingerprint(cache, request["config"], request["sources"])}
    elif command == "inspect":
        reply = inspect(cache)
    else:
        sys.exit(f"dnanet_peer: unknown command {command!r}")
    json.dump(reply, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
