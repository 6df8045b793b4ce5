"""Shared helpers of the stowage pytest suite.

Everything here follows the contract in the package's stubs (``stowage/__init__.pyi``): sample
values, the backends that write caches, what each backend is documented to support (the workspace
README's capability table), and the reference caches the original tools wrote
(``$STOWAGE_REFERENCE_DIR``, default ``../shared/reference`` beside the workspace; missing: the
tests skip, or fail under ``STOWAGE_REQUIRE_REFERENCE=1``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

import stowage

# --------------------------------------------------------------------------------------------
# Backends and what they are documented to do (README's capability table; remote from
# stowage_remote::capabilities). Tests assert the declared behaviour both ways: a declared
# capability works, an undeclared one is refused with UnsupportedError.

WRITABLE_BACKENDS = ["arrow", "memmap", "npy", "hdf5", "remote"]

DTYPES = [
    "bool",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]

#: backend -> capability -> bool, as documented.
DOCUMENTED = {
    "arrow": dict(variable_shapes=True, ragged=True, nullable=True, bytes=True, json=True,
                  bfloat16=True, zero_copy=True, overwrite=True),
    "memmap": dict(variable_shapes=False, ragged=False, nullable=True, bytes=False, json=True,
                   bfloat16=False, zero_copy=True, overwrite=False),
    "npy": dict(variable_shapes=True, ragged=False, nullable=False, bytes=False, json=False,
                bfloat16=True, zero_copy=True, overwrite=True),
    "hdf5": dict(variable_shapes=True, ragged=True, nullable=True, bytes=True, json=True,
                 bfloat16=True, zero_copy=False, overwrite=True),
    "remote": dict(variable_shapes=True, ragged=True, nullable=True, bytes=True, json=True,
                   bfloat16=True, zero_copy=False, overwrite=False),
}

#: Names a capability may carry in ``Cache.capabilities`` (the contract names ``zero_copy``;
#: the rest follow ``stowage_core::Capabilities``).
CAPABILITY_NAMES = {
    "zero_copy": ("zero_copy", "zero_copy_get"),
    "variable_shapes": ("variable_shapes",),
    "ragged": ("ragged",),
    "nullable": ("nullable",),
    "bytes": ("bytes_fields", "bytes"),
    "json": ("json_fields", "json"),
    "overwrite": ("overwrite",),
}


def capability(cache: "stowage.Cache", name: str) -> bool:
    """The capability ``name`` (one of CAPABILITY_NAMES) as ``cache.capabilities`` reports it."""
    caps = cache.capabilities
    assert isinstance(caps, dict), f"capabilities is not a dict: {caps!r}"
    for candidate in CAPABILITY_NAMES[name]:
        if candidate in caps:
            value = caps[candidate]
            assert isinstance(value, bool), f"capabilities[{candidate!r}] = {value!r} is not a bool"
            return value
    raise AssertionError(f"capabilities has no entry for {name} ({CAPABILITY_NAMES[name]}): {caps}")


def cache_location(tmp_path: pathlib.Path, backend: str, name: str = "cache") -> str:
    """Where a test creates a cache of ``backend``: a ``file://`` URL for remote, else a path."""
    if backend == "remote":
        return (tmp_path / name).as_uri()
    return str(tmp_path / name)


def local_dir(location: str) -> pathlib.Path:
    """The local directory holding a cache created at ``location`` (a path or file:// URL)."""
    if location.startswith("file://"):
        return pathlib.Path(location[len("file://"):])
    return pathlib.Path(location)


# --------------------------------------------------------------------------------------------
# Values.

BF16_META = {"stowage_dtype": "bfloat16"}


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype values of ``name`` are put and got as (uint16 for bfloat16)."""
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


def tensor(dtype: str, shape, seed: int) -> np.ndarray:
    """A deterministic array of ``dtype`` and ``shape``, different for each seed, with the
    extremes of integer types and special floats mixed in."""
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    rng = np.random.default_rng(1000 + seed)
    if dtype == "bool":
        flat = rng.integers(0, 2, size=n).astype(bool)
        if n:
            flat[0] = bool(seed % 2)
    elif dtype == "bfloat16":
        # Bit patterns of bfloat16 values: 1.0, -2.0, 0.5 ... and random ones.
        flat = rng.integers(0, 0x7F00, size=n, dtype=np.uint16)
        patterns = [0x3F80, 0xC000, 0x3F00, 0x0000, 0x8000, 0x7F80]
        flat[: min(n, len(patterns))] = patterns[: min(n, len(patterns))]
    elif np.dtype(dtype).kind in "ui":
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        extremes = [info.min, info.max, 0, seed % (int(info.max) + 1)]
        flat[: min(n, 4)] = np.array(extremes[: min(n, 4)], dtype=dtype)
    else:
        flat = (rng.standard_normal(n) * 100).astype(dtype)
        specials = [seed + 0.5, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny]
        flat[: min(n, 4)] = np.array(specials[: min(n, 4)], dtype=dtype)
    return flat.reshape(shape)


def marker_tensor(seed: int, n: int = 64) -> np.ndarray:
    """A float64 array whose bytes are unlikely to appear anywhere else in a cache: a search
    for ``marker_bytes(seed)`` finds the sample's stored bytes (used by the corruption tests)."""
    base = np.frombuffer(b"STOWAGE-MARKER--", dtype=np.float64)  # two 8-byte words
    values = np.arange(n, dtype=np.float64) + 1234567.125 + seed * 1000.0
    values[:2] = base
    return values


def assert_same_array(got: Any, want: np.ndarray, dtype_name: Optional[str] = None, what: str = ""):
    """``got`` is a numpy array with ``want``'s dtype, shape and bytes (bfloat16: uint16 with the
    dtype metadata the contract names)."""
    assert isinstance(got, np.ndarray), f"{what}: got {type(got).__name__}, not an ndarray"
    if dtype_name == "bfloat16":
        assert got.dtype == np.uint16, f"{what}: bfloat16 came back as {got.dtype}"
        assert got.dtype.metadata == BF16_META, (
            f"{what}: bfloat16 array's dtype.metadata is {got.dtype.metadata!r}, want {BF16_META}"
        )
    else:
        want_dtype = np.dtype(dtype_name) if dtype_name else want.dtype
        assert got.dtype == want_dtype, f"{what}: dtype {got.dtype} != {want_dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), (
        f"{what}: bytes differ: got {got!r}, want {want!r}"
    )


def assert_value(got: Any, want: Any, dtype_name: Optional[str] = None, what: str = ""):
    """One field's value as ``get`` returns it equals ``want`` (array, bytes, JSON text, None)."""
    if want is None:
        assert got is None, f"{what}: got {got!r}, want None"
    elif isinstance(want, np.ndarray):
        assert_same_array(got, want, dtype_name, what)
    elif isinstance(want, (bytes, bytearray, memoryview)):
        assert isinstance(got, bytes), f"{what}: got {type(got).__name__}, want bytes"
        assert got == bytes(want), f"{what}: {got!r} != {bytes(want)!r}"
    elif isinstance(want, str):
        assert isinstance(got, str), f"{what}: got {type(got).__name__}, want str"
        assert got == want, f"{what}: {got!r} != {want!r}"
    else:
        raise AssertionError(f"no comparison for {want!r}")


# --------------------------------------------------------------------------------------------
# A small standard cache: field "x" float32 [4, 3] and "y" int64 [2], N_SMALL samples.

N_SMALL = 24


def small_schema() -> Dict[str, Any]:
    return {"x": ("float32", [4, 3]), "y": ("int64", [2])}


def small_sample(i: int) -> Dict[str, np.ndarray]:
    return {
        "x": (np.arange(12, dtype=np.float32).reshape(4, 3) + np.float32(i * 100)),
        "y": np.array([i, -i * 7], dtype=np.int64),
    }


def small_key(i: int) -> str:
    return f"k{i:03d}"


def build_small(location: str, backend: str, n: int = N_SMALL, finalize: bool = True) -> str:
    """Writes the small cache of ``n`` samples at ``location``; returns the location."""
    cache = stowage.create(location, backend=backend, schema=small_schema())
    try:
        for i in range(n):
            cache.put(small_key(i), small_sample(i))
        cache.flush()
        if finalize:
            cache.finalize()
    finally:
        cache.close()
    return location


def build_constant_rows(location: str, backend: str, width: int, n: int = 16,
                        finalize: bool = False) -> str:
    """Writes ``n`` samples ``k{i}`` whose one field ``x`` is ``width`` float32 values all equal
    to ``i``; returns the location."""
    with stowage.create(location, backend=backend, schema={"x": ("float32", [width])}) as cache:
        for i in range(n):
            cache.put(f"k{i}", {"x": np.full(width, i, np.float32)})
        if finalize:
            cache.finalize()
    return location


@pytest.fixture(params=WRITABLE_BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def small_cache(tmp_path, backend) -> str:
    """A finalized small cache of each writable backend (parametrized)."""
    return build_small(cache_location(tmp_path, backend), backend)


@pytest.fixture
def arrow_small(tmp_path) -> str:
    return build_small(cache_location(tmp_path, "arrow"), "arrow")


# --------------------------------------------------------------------------------------------
# Reference caches.


def _reference_root() -> pathlib.Path:
    value = os.environ.get("STOWAGE_REFERENCE_DIR")
    if value:
        return pathlib.Path(value)
    # As the Rust tests: <workspace>/../shared/reference (tests/ is
    # <workspace>/crates/stowage-py/tests).
    return pathlib.Path(__file__).resolve().parents[4] / "shared" / "reference"


def reference_set(name: str) -> pathlib.Path:
    """The folder of reference set ``name``; skips (or fails under STOWAGE_REQUIRE_REFERENCE=1)
    when it is missing."""
    path = _reference_root() / name
    if path.is_dir():
        return path
    reason = f"reference set {name} not found at {path} (set STOWAGE_REFERENCE_DIR)"
    if os.environ.get("STOWAGE_REQUIRE_REFERENCE") == "1":
        pytest.fail(reason + " and STOWAGE_REQUIRE_REFERENCE=1 requires it")
    pytest.skip(reason)


# --------------------------------------------------------------------------------------------
# Running Python code in a child interpreter (crashes must not take the suite down).


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new interpreter with this one's sys.path; returns the completed run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def find_bytes(root: pathlib.Path, needle: bytes) -> List[tuple]:
    """Every (file, offset) under ``root`` where ``needle`` occurs."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            at = data.find(needle)
            while at != -1:
                found.append((path, at))
                at = data.find(needle, at + 1)
    return found


def flip_byte(path: pathlib.Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
