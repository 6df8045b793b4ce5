#!/usr/bin/env python3
"""Drives hangar 0.5.2's own NUMPY_10 backend on a directory, for stowage's mixed-writer tests.

This is a driver, not a re-implementation: it imports hangar and calls exactly the calls hangar's
column accessors make on its NUMPY_10 backend (hangar.backends.numpy_10.NUMPY_10_FileHandles),
with records decoded by hangar's own hangar.backends.specparse.backend_decoder, as hangar does
with the record strings it keeps in its LMDB.

Usage: hangar_peer.py COMMAND, with a JSON request on stdin and one JSON answer on stdout.

  version  request {}
           answer  {"hangar": "0.5.2", "numpy": "...", "xxhash": "...", "python": "..."}

  write    request {"repo": DIR, "schema_shape": [3, 4], "schema_dtype": "<f4",
                    "arrays": [{"shape": [1, 4], "hex": "<C-order bytes as hex>"}, ...],
                    "collection_size": null}
           NUMPY_10_FileHandles(repo_path=DIR, schema_shape, schema_dtype), open(mode='a'),
           write_data(array) for each array inside `with handles:`, close(). hangar creates one new
           collection file data/10/<uid>.npy (more when the arrays overflow collection_size,
           hangar's COLLECTION_SIZE, default 1000) and its marker stage_data/10/<uid>.npy.
           answer  {"records": ["10:<uid>:<xxh64>:<slot>:<shape>", ...]}

  read     request {"repo": DIR, "schema_shape": [...], "schema_dtype": "<f4",
                    "modes": ["a", "r"], "records": ["10:...", ...]}
           For each mode: open(mode) (a writer checkout's 'a' sees staged and committed files,
           a reader checkout's 'r' committed ones only), read_data(backend_decoder(record)) for
           each record, close().
           answer  {"results": {MODE: [{"record": R, "ok": true, "dtype": "<f4", "shape": [...],
                                        "hex": "<C-order bytes as hex>"}
                                       | {"record": R, "ok": false,
                                          "error": "KeyError: 'uid'"}, ...], ...}}

Exits 1 with the Python traceback on stderr when the request is malformed or hangar fails outside
read_data. Needs hangar 0.5.2 with numpy < 1.24 (hangar uses np.bool). hangar 0.5.2's generated
protobuf modules predate protobuf 3.20's API check: this driver selects protobuf's pure-Python
implementation before hangar is imported, so it runs with any protobuf (or install
"protobuf<3.21" in the venv).
"""

import json
import os
import platform
import sys

# Before any protobuf import: hangar's *_pb2.py files fail with the default (upb) implementation.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xxhash  # noqa: E402

import hangar  # noqa: E402
from hangar.backends import numpy_10  # noqa: E402
from hangar.backends.specparse import backend_decoder  # noqa: E402


def handles(request):
    """hangar's NUMPY_10 file handles for the column the request describes."""
    return numpy_10.NUMPY_10_FileHandles(
        repo_path=Path(request["repo"]),
        schema_shape=tuple(request["schema_shape"]),
        schema_dtype=np.dtype(request["schema_dtype"]),
    )


def version(_request):
    return {
        "hangar": hangar.__version__,
        "numpy": np.__version__,
        "xxhash": xxhash.VERSION,
        "python": platform.python_version(),
    }


def write(request):
    if request.get("collection_size") is not None:
        numpy_10.COLLECTION_SIZE = int(request["collection_size"])
    dtype = np.dtype(request["schema_dtype"])
    arrays = [
        np.frombuffer(bytes.fromhex(a["hex"]), dtype=dtype).reshape(tuple(a["shape"]))
        for a in request["arrays"]
    ]
    h = handles(request)
    h.open(mode="a")
    records = []
    with h:
        for array in arrays:
            records.append(h.write_data(array).decode("ascii"))
    h.close()
    return {"records": records}


def read(request):
    return {"results": {mode: read_in_mode(request, mode) for mode in request["modes"]}}


def read_in_mode(request, mode):
    h = handles(request)
    h.open(mode=mode)
    results = []
    for record in request["records"]:
        try:
            out = h.read_data(backend_decoder(record.encode("ascii")))
        except (KeyError, RuntimeError, OSError, ValueError) as e:
            results.append({"record": record, "ok": False, "error": f"{type(e).__name__}: {e}"})
            continue
        results.append(
            {
                "record": record,
                "ok": True,
                "dtype": out.dtype.str,
                "shape": list(out.shape),
                "hex": out.tobytes().hex(),
            }
        )
    h.close()
    return results


COMMANDS = {"version": version, "write": write, "read": read}


def main(argv):
    if len(argv) != 2 or argv[1] not in COMMANDS:
        sys.stderr.write(f"usage: {argv[0]} {{{','.join(COMMANDS)}}} < request.json\n")
        return 1
    request = json.load(sys.stdin)
    json.dump(COMMANDS[argv[1]](request), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
