#!/usr/bin/env python3
"""Python peer of torchcachex's ArrowIPCCacheBackend, for the mixed-writer tests of stowage-arrow.

It reproduces the read and write paths of torchcachex's src/torchcachex/backend.py at commit
e069d93 (version 0.2.0), written anew from reading that file function by function, so that the
Rust tests can run torchcachex's behaviour where torch is not installed (CI):

- __init__: segments/ created; schema.json loaded when it exists (a corrupt one ignored);
  the index loaded from index.pkl when it exists and unpickles, else rebuilt from the segments;
  the next segment id taken from the directory listing.
- _load_index, _rebuild_index_from_segments (segments in *text* order of sorted(glob(
  "segment_*.arrow")), only the first record batch's key column, a segment that fails skipped,
  the later one winning), _save_index (pickle protocol HIGHEST_PROTOCOL to index.pkl.tmp,
  renamed), _get_next_segment_id (largest id in the listing, plus one).
- _load_schema, _save_schema, _serialize_arrow_type, _parse_arrow_type (with its defects: an
  unknown type string, such as "halffloat", becomes string), _infer_schema_from_sample.
- put_batch (schema inferred and saved on the first write; only the writer rank persists),
  _serialize_sample, _flush_segment (a missing value: [] for a list column, b"" for binary,
  None otherwise; one record batch; segment_<id:06d>.arrow.tmp renamed into place; index
  updated and re-pickled), flush.
- get_batch (index lookup grouped by segment, pa.memory_map + ipc.open_file + read_all + take,
  to_numpy per column) and _deserialize_sample (np.array(data), reshape(tuple(shape)) per
  tensor entry, pickle.loads per blob).
- __del__ as close(): flush, then _save_index (also after a run that only read).

Where it departs from the original:
- numpy stands in for torch. A tensor is a numpy ndarray (torch.is_tensor -> isinstance of
  np.ndarray); .detach().cpu().flatten().numpy().tolist() -> np.asarray(x).flatten().tolist();
  str(tensor.dtype) -> "torch." + numpy's dtype name; _torch_to_arrow_dtype maps the numpy
  dtypes of the same nine torch dtypes (anything else to float32, as the original does);
  torch.from_numpy(data).reshape(shape) -> from_numpy(data).reshape(shape), where from_numpy
  raises TypeError for the arrays torch.from_numpy refuses (object, bytes, str and void dtypes,
  which torch has no tensor type for: a null list cell arrives as None) and numpy's reshape
  raises where torch's does (a size that does not match the shape, such as [] reshaped to ()),
  with ValueError instead of RuntimeError; .to(map_location) is dropped.
- Writes are synchronous (async_write=False) and there is no in-process LRU (each command of
  the command-line interface below is a fresh process whose reads all go to disk, as with
  lru_size=0 after a restart). __del__ is the explicit close() the command-line interface calls.

Command-line interface (JSON in and out), used by crates/stowage-arrow/tests:

    torchcachex_peer.py append CACHE_DIR [--flush-every N]
        stdin: {key: value, ...}; one put_batch of them in order, flush, close.
    torchcachex_peer.py read CACHE_DIR [--keys JSON_LIST]
        One get_batch([key]) per key (every key of the index, sorted, unless --keys); prints
        {"index": {key: [segment, row]}, "output_structure": ..., "values": {key: value or
        {"error": "Type: message"} or {"missing": true}}}, then close (which writes index.pkl).
    torchcachex_peer.py open CACHE_DIR
        Construct and close only: what a run that only opened the cache leaves behind.

CACHE_DIR is <cache_dir>/<module_id>, as the backend joins them. Values in JSON:
{"tensor": {"dtype": "float32", "shape": [...], "hex": C-order little-endian bytes}},
{"dict": {name: value}}, {"tuple": [values]}, {"list": [values]}, {"bytes": hex},
{"str": text}, {"int": n}, {"none": null}, and {"pickle": hex} for any other object (read:
the pickle.dumps of it; append: pickle.loads'ed first). Needs numpy and pyarrow.
"""

import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc


def is_tensor(value):
    return isinstance(value, np.ndarray)


def torch_dtype_name(dtype):
    return "torch." + np.dtype(dtype).name


def from_numpy(data):
    """torch.from_numpy's refusals: arrays of a dtype torch has no tensor type for."""
    data = np.asarray(data)
    if data.dtype.kind in "OSUV":
        raise TypeError(
            "can't convert np.ndarray of type numpy.%s. The only supported types are: "
            "float64, float32, float16, complex64, complex128, int64, int32, int16, int8, "
            "uint64, uint32, uint16, uint8, and bool." % data.dtype.name
        )
    return data


class ArrowIPCCacheBackend:
    """torchcachex's backend at e069d93, synchronous, numpy for torch (see the module docs)."""

    def __init__(self, cache_dir, module_id, flush_every=2048, writer_rank=0, current_rank=None):
        self.cache_dir = Path(cache_dir) / module_id
        self.segments_dir = self.cache_dir / "segments"
        self.index_path = self.cache_dir / "index.pkl"
        self.schema_path = self.cache_dir / "schema.json"
        self.module_id = module_id
        self.segments_dir.mkdir(parents=True, exist_ok=True)
        self.schema = None
        self.output_structure = None
        if self.schema_path.exists():
            try:
                self.schema = self._load_schema()
            except Exception:
                self.schema = None
        self.index = self._load_index()
        self.flush_every = int(flush_every)
        self.writer_rank = int(writer_rank)
        self.current_rank = (
            int(current_rank) if current_rank is not None else int(os.getenv("RANK", 0))
        )
        self._pending = []
        self._current_segment_id = self._get_next_segment_id()

    def _load_index(self):
        if not self.index_path.exists():
            return self._rebuild_index_from_segments()
        try:
            with open(self.index_path, "rb") as f:
                return pickle.load(f)
        except Exception:
            return self._rebuild_index_from_segments()

    def _rebuild_index_from_segments(self):
        index = {}
        for segment_file in sorted(self.segments_dir.glob("segment_*.arrow")):
            segment_id = int(segment_file.stem.split("_")[1])
            try:
                with pa.memory_map(str(segment_file), "r") as source:
                    batch = pa.ipc.open_file(source).get_batch(0)
                    for offset, key in enumerate(batch.column("key").to_pylist()):
                        index[key] = (segment_id, offset)
            except Exception:
                continue
        return index

    def _save_index(self):
        temp_path = self.index_path.with_suffix(".pkl.tmp")
        with open(temp_path, "wb") as f:
            pickle.dump(self.index, f, protocol=pickle.HIGHEST_PROTOCOL)
        temp_path.rename(self.index_path)

    def _get_next_segment_id(self):
        segment_files = list(self.segments_dir.glob("segment_*.arrow"))
        if not segment_files:
            return 0
        return max(int(f.stem.split("_")[1]) for f in segment_files) + 1

    def _load_schema(self):
        with open(self.schema_path) as f:
            schema_dict = json.load(f)
        fields = [
            pa.field(field["name"], self._parse_arrow_type(field["type"]))
            for field in schema_dict["fields"]
        ]
        schema = pa.schema(fields)
        if "metadata" in schema_dict:
            metadata = {
                (k.encode() if isinstance(k, str) else k): (v.encode() if isinstance(v, str) else v)
                for k, v in schema_dict["metadata"].items()
            }
            schema = schema.with_metadata(metadata)
        self.output_structure = schema_dict.get("output_structure")
        return schema

    def _save_schema(self):
        metadata = {}
        if self.schema.metadata:
            for k, v in self.schema.metadata.items():
                metadata[k.decode() if isinstance(k, bytes) else str(k)] = (
                    v.decode() if isinstance(v, bytes) else str(v)
                )
        schema_dict = {
            "fields": [
                {"name": field.name, "type": self._serialize_arrow_type(field.type)}
                for field in self.schema
            ],
            "metadata": metadata,
            "output_structure": self.output_structure,
        }
        with open(self.schema_path, "w") as f:
            json.dump(schema_dict, f, indent=2)

    def _serialize_arrow_type(self, arrow_type):
        if pa.types.is_list(arrow_type):
            return f"list<{self._serialize_arrow_type(arrow_type.value_type)}>"
        return str(arrow_type)

    def _parse_arrow_type(self, type_str):
        if type_str.startswith("list<"):
            inner = type_str[5:-1]
            if ": " in inner:
                inner = inner.split(": ")[1]
            return pa.list_(self._parse_arrow_type(inner))
        type_map = {
            "string": pa.string(), "binary": pa.binary(), "int8": pa.int8(),
            "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
            "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(),
            "uint64": pa.uint64(), "float16": pa.float16(), "float32": pa.float32(),
            "float64": pa.float64(), "float": pa.float32(), "double": pa.float64(),
            "bool": pa.bool_(),
        }
        return type_map.get(type_str, pa.string())

    def _torch_to_arrow_dtype(self, dtype):
        mapping = {
            np.dtype(np.float32): pa.float32(), np.dtype(np.float64): pa.float64(),
            np.dtype(np.float16): pa.float16(), np.dtype(np.int32): pa.int32(),
            np.dtype(np.int64): pa.int64(), np.dtype(np.int16): pa.int16(),
            np.dtype(np.int8): pa.int8(), np.dtype(np.uint8): pa.uint8(),
            np.dtype(np.bool_): pa.bool_(),
        }
        return mapping.get(np.dtype(dtype), pa.float32())

    def _infer_schema_from_sample(self, sample):
        fields = [("key", pa.string())]
        if is_tensor(sample):
            dtype = self._torch_to_arrow_dtype(sample.dtype)
            fields.extend([("data", pa.list_(dtype)), ("shape", pa.list_(pa.int64()))])
            self.output_structure = "tensor"
            return pa.schema(fields).with_metadata({"torch_dtype": torch_dtype_name(sample.dtype)})
        if isinstance(sample, dict):
            self.output_structure = "dict"
            tensor_keys = []
            for name, value in sample.items():
                if is_tensor(value):
                    dtype = self._torch_to_arrow_dtype(value.dtype)
                    fields.extend(
                        [(f"{name}_data", pa.list_(dtype)), (f"{name}_shape", pa.list_(pa.int64()))]
                    )
                    tensor_keys.append(name)
                else:
                    fields.append((f"{name}_blob", pa.binary()))
            return pa.schema(fields).with_metadata({"tensor_keys": json.dumps(tensor_keys)})
        if isinstance(sample, (list, tuple)):
            self.output_structure = "tuple" if isinstance(sample, tuple) else "list"
            for i, item in enumerate(sample):
                if is_tensor(item):
                    dtype = self._torch_to_arrow_dtype(item.dtype)
                    fields.extend(
                        [(f"item{i}_data", pa.list_(dtype)), (f"item{i}_shape", pa.list_(pa.int64()))]
                    )
                else:
                    fields.append((f"item{i}_blob", pa.binary()))
        else:
            fields.append(("blob", pa.binary()))
            self.output_structure = "blob"
        return pa.schema(fields)

    def _tensor_keys(self):
        key = b"tensor_keys" if b"tensor_keys" in self.schema.metadata else "tensor_keys"
        text = self.schema.metadata[key]
        return json.loads(text.decode() if isinstance(text, bytes) else text)

    def _serialize_sample(self, key, sample):
        row = {"key": key}
        if self.output_structure == "tensor":
            row["data"] = np.asarray(sample).flatten().tolist()
            row["shape"] = list(sample.shape)
        elif self.output_structure == "dict":
            tensor_keys = self._tensor_keys()
            for name in tensor_keys:
                tensor = sample[name]
                row[f"{name}_data"] = np.asarray(tensor).flatten().tolist()
                row[f"{name}_shape"] = list(tensor.shape)
            for name, value in sample.items():
                if name not in tensor_keys:
                    row[f"{name}_blob"] = pickle.dumps(value)
        elif self.output_structure in ("tuple", "list"):
            for i, item in enumerate(sample):
                if is_tensor(item):
                    row[f"item{i}_data"] = np.asarray(item).flatten().tolist()
                    row[f"item{i}_shape"] = list(item.shape)
                else:
                    row[f"item{i}_blob"] = pickle.dumps(item)
        elif self.output_structure == "blob":
            row["blob"] = pickle.dumps(sample)
        return row

    def _tensor_of(self, data, shape):
        data = data if isinstance(data, np.ndarray) else np.array(data)
        data = np.array(data, copy=True) if not data.flags.writeable else data
        return from_numpy(data).reshape(tuple(shape))

    def _deserialize_sample(self, row):
        if self.output_structure == "tensor":
            return self._tensor_of(row["data"], row["shape"])
        if self.output_structure == "dict":
            result = {}
            for name in self._tensor_keys():
                result[name] = self._tensor_of(row[f"{name}_data"], row[f"{name}_shape"])
            for key in row.keys():
                if key.endswith("_blob"):
                    result[key[:-5]] = pickle.loads(row[key])
            return result
        if self.output_structure in ("tuple", "list"):
            items = []
            i = 0
            while f"item{i}_data" in row or f"item{i}_blob" in row:
                if f"item{i}_data" in row:
                    items.append(self._tensor_of(row[f"item{i}_data"], row[f"item{i}_shape"]))
                else:
                    items.append(pickle.loads(row[f"item{i}_blob"]))
                i += 1
            return tuple(items) if self.output_structure == "tuple" else items
        return pickle.loads(row["blob"])

    def get_batch(self, keys):
        results = [None] * len(keys)
        segment_reads = {}
        for result_idx, key in enumerate(keys):
            if key in self.index:
                segment_id, row_offset = self.index[key]
                segment_reads.setdefault(segment_id, []).append((key, row_offset, result_idx))
        for segment_id, reads in segment_reads.items():
            segment_file = self.segments_dir / f"segment_{segment_id:06d}.arrow"
            with pa.memory_map(str(segment_file), "r") as source:
                table = pa.ipc.open_file(source).read_all()
                subtable = table.take([offset for _, offset, _ in reads])
                columns = {name: subtable[name].to_numpy() for name in subtable.column_names}
                for idx, (_, _, result_idx) in enumerate(reads):
                    row = {k: v[idx] for k, v in columns.items()}
                    results[result_idx] = self._deserialize_sample(row)
        missing = [i for i, v in enumerate(results) if v is None]
        return results, missing

    def put_batch(self, items):
        if not items:
            return
        if self.schema is None:
            self.schema = self._infer_schema_from_sample(next(iter(items.values())))
            self._save_schema()
        if self.current_rank != self.writer_rank:
            return
        entries = [(k, self._serialize_sample(k, v)) for k, v in items.items()]
        self._pending.extend(entries)
        if len(self._pending) >= self.flush_every:
            self._flush_segment()

    def _flush_segment(self):
        batch = self._pending
        self._pending = []
        if not batch:
            return
        segment_id = self._current_segment_id
        self._current_segment_id += 1
        rows = [row for _, row in batch]
        arrays = {}
        for field in self.schema:
            values = []
            for row in rows:
                value = row.get(field.name)
                if value is None:
                    if pa.types.is_list(field.type):
                        values.append([])
                    elif pa.types.is_binary(field.type):
                        values.append(b"")
                    else:
                        values.append(None)
                else:
                    values.append(value)
            array = pa.array(values, type=field.type)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            arrays[field.name] = array
        record_batch = pa.RecordBatch.from_arrays(list(arrays.values()), schema=self.schema)
        temp_file = self.segments_dir / f"segment_{segment_id:06d}.arrow.tmp"
        final_file = self.segments_dir / f"segment_{segment_id:06d}.arrow"
        with pa.OSFile(str(temp_file), "wb") as sink:
            writer = pa.ipc.new_file(sink, self.schema)
            writer.write_batch(record_batch)
            writer.close()
        temp_file.rename(final_file)
        try:
            for i, (key, _) in enumerate(batch):
                self.index[key] = (segment_id, i)
            self._save_index()
        except Exception:
            if final_file.exists():
                final_file.unlink()
            raise

    def flush(self):
        if self.current_rank != self.writer_rank:
            return
        if self._pending:
            self._flush_segment()

    def close(self):
        """The original's __del__: flush, then save the index (errors swallowed there too)."""
        try:
            self.flush()
            self._save_index()
        except Exception:
            pass


def decode_value(value):
    """A JSON value of the interface as the Python object torchcachex is given."""
    (kind, body), = value.items()
    if kind == "tensor":
        data = np.frombuffer(bytes.fromhex(body["hex"]), dtype=np.dtype(body["dtype"]).newbyteorder("<"))
        return data.astype(np.dtype(body["dtype"])).reshape(body["shape"]).copy()
    if kind == "dict":
        return {name: decode_value(v) for name, v in body.items()}
    if kind == "tuple":
        return tuple(decode_value(v) for v in body)
    if kind == "list":
        return [decode_value(v) for v in body]
    if kind == "bytes":
        return bytes.fromhex(body)
    if kind == "str":
        return body
    if kind == "int":
        return int(body)
    if kind == "none":
        return None
    if kind == "pickle":
        return pickle.loads(bytes.fromhex(body))
    raise ValueError(f"unknown value kind {kind!r}")


def encode_value(value):
    """What torchcachex returned, as a JSON value of the interface."""
    if isinstance(value, np.ndarray):
        data = value.copy(order="C")  # np.ascontiguousarray would make a 0-d array 1-d
        little = data.astype(data.dtype.newbyteorder("<"), copy=False)
        return {"tensor": {"dtype": data.dtype.name, "shape": list(data.shape),
                           "hex": little.tobytes().hex()}}
    if isinstance(value, dict):
        return {"dict": {str(k): encode_value(v) for k, v in value.items()}}
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return {"list": [encode_value(v) for v in value]}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, str):
        return {"str": value}
    if value is None:
        return {"none": None}
    if isinstance(value, int) and not isinstance(value, bool):
        return {"int": value}
    return {"pickle": pickle.dumps(value, protocol=4).hex()}


def open_backend(cache, **kwargs):
    cache = Path(cache)
    return ArrowIPCCacheBackend(str(cache.parent), cache.name, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["append", "read", "open"])
    parser.add_argument("cache")
    parser.add_argument("--flush-every", type=int, default=2048)
    parser.add_argument("--keys", help="JSON list of the keys to read")
    args = parser.parse_args()
    if args.command == "append":
        items = json.loads(sys.stdin.read())
        backend = open_backend(args.cache, flush_every=args.flush_every)
        backend.put_batch({key: decode_value(value) for key, value in items.items()})
        backend.flush()
        backend.close()
        print(json.dumps({"appended": len(items)}))
    elif args.command == "read":
        backend = open_backend(args.cache)
        keys = json.loads(args.keys) if args.keys else sorted(backend.index)
        values = {}
        for key in keys:
            try:
                got, missing = backend.get_batch([key])
                values[key] = {"missing": True} if missing else encode_value(got[0])
            except Exception as e:  # what torchcachex raises, named
                values[key] = {"error": f"{type(e).__name__}: {e}"}
        index = {key: list(entry) for key, entry in backend.index.items()}
        backend.close()
        print(json.dumps({"index": index, "output_structure": backend.output_structure,
                          "values": values}))
    else:
        open_backend(args.cache).close()
        print(json.dumps({"opened": True}))


if __name__ == "__main__":
    main()
