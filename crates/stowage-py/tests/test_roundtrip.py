"""Round trips through every writable backend: every dtype, every shape rule, bytes, JSON and
nullable fields, batches, attributes, reopening, the context manager and pickling."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import stowage
from conftest import (
    BF16_META,
    DOCUMENTED,
    DTYPES,
    N_SMALL,
    WRITABLE_BACKENDS,
    assert_same_array,
    assert_value,
    build_small,
    cache_location,
    capability,
    np_dtype,
    run_python,
    small_key,
    small_sample,
    small_schema,
    tensor,
)


def refused_unless_documented(location, backend, schema, capability_name):
    """Whether `backend` does not document `capability_name`: then `create` with `schema` must
    raise `UnsupportedError` (asserted here), and the test has nothing more to check."""
    if DOCUMENTED[backend][capability_name]:
        return False
    with pytest.raises(stowage.UnsupportedError):
        stowage.create(location, backend=backend, schema=schema)
    return True


def test_backends_lists_the_five_registered_backends():
    assert sorted(stowage.backends()) == sorted(WRITABLE_BACKENDS)
    assert isinstance(stowage.backends(), list)


def test_dtypes_constant_names_the_thirteen_dtypes():
    assert tuple(stowage.DTYPES) == tuple(DTYPES) or sorted(stowage.DTYPES) == sorted(DTYPES)


def test_version_is_a_string():
    assert isinstance(stowage.__version__, str) and stowage.__version__


def test_error_classes_derive_from_the_documented_builtins():
    assert issubclass(stowage.CorruptedError, stowage.StowageError)
    assert issubclass(stowage.SchemaMismatchError, ValueError)
    assert issubclass(stowage.InvalidArgumentError, ValueError)
    assert issubclass(stowage.UnsupportedError, NotImplementedError)
    assert issubclass(stowage.CacheNotFoundError, FileNotFoundError)
    assert issubclass(stowage.CacheExistsError, FileExistsError)
    assert issubclass(stowage.StowageIOError, OSError)
    for name in [
        "CorruptedError", "SchemaMismatchError", "UnsupportedError", "FinalizedError",
        "PoisonedError", "IncompatibleError", "LockedError", "CacheNotFoundError",
        "CacheExistsError", "InvalidArgumentError", "StowageIOError", "InternalError",
    ]:
        assert issubclass(getattr(stowage, name), stowage.StowageError), name


# ---------------------------------------------------------------------------------------------
# Every dtype through every backend.

SHAPE = [3, 5]
N_DTYPE = 5


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips(tmp_path, backend, dtype):
    location = cache_location(tmp_path, backend)
    schema = {"t": (dtype, SHAPE), "z": (dtype, [])}
    supported = dtype != "bfloat16" or DOCUMENTED[backend]["bfloat16"]
    if not supported:
        with pytest.raises(stowage.UnsupportedError):
            stowage.create(location, backend=backend, schema=schema)
        return
    values = {f"s{i}": {"t": tensor(dtype, SHAPE, i), "z": tensor(dtype, [], i + 50)}
              for i in range(N_DTYPE)}
    cache = stowage.create(location, backend=backend, schema=schema)
    assert cache.mode == "w"
    for key, sample in values.items():
        cache.put(key, sample)
    cache.flush()
    cache.finalize()
    cache.close()

    with stowage.open(location) as cache:
        assert cache.backend == backend
        assert cache.mode == "r"
        assert sorted(cache.keys()) == sorted(values)
        assert len(cache) == N_DTYPE
        spec = cache.schema["t"]
        assert spec["kind"] == "tensor"
        assert spec["dtype"] == dtype
        assert spec["shape"] == SHAPE
        assert spec["rule"] == "fixed"
        assert spec["nullable"] is False
        assert list(cache.schema) == ["t", "z"], "schema order"
        for key, want in values.items():
            got = cache.get(key)
            assert list(got) == ["t", "z"], "fields in schema order"
            for field in ("t", "z"):
                assert_same_array(got[field], want[field], dtype, f"{backend} {dtype} {key} {field}")
                assert got[field].flags.writeable is False, f"{backend} {dtype}: get gives read-only"
        batch = cache.get_batch(list(values))
        want_t = np.stack([v["t"] for v in values.values()])
        assert_same_array(batch["t"], want_t, dtype, f"{backend} {dtype} get_batch")
        out = {"t": np.zeros((N_DTYPE, *SHAPE), dtype=np_dtype(dtype)),
               "z": np.zeros((N_DTYPE,), dtype=np_dtype(dtype))}
        cache.get_batch_into(list(values), out)
        assert out["t"].tobytes() == want_t.tobytes(), f"{backend} {dtype} get_batch_into"
        assert out["z"].tobytes() == np.stack([v["z"] for v in values.values()]).tobytes()


def test_bfloat16_accepts_its_own_get_result_and_plain_uint16(tmp_path):
    location = cache_location(tmp_path, "arrow")
    with stowage.create(location, backend="arrow", schema={"b": ("bfloat16", [4])}) as cache:
        cache.put("plain", {"b": np.array([0x3F80, 0x4000, 0xC000, 0], dtype=np.uint16)})
        tagged = np.array([0x3F00, 1, 2, 3], dtype=np.dtype(np.uint16, metadata=dict(BF16_META)))
        cache.put("tagged", {"b": tagged})
    with stowage.open(location) as cache:
        got = cache.get("plain")["b"]
        assert_same_array(got, np.array([0x3F80, 0x4000, 0xC000, 0], dtype=np.uint16), "bfloat16")
        assert_same_array(cache.get("tagged")["b"], tagged, "bfloat16")
        copy = cache.get("tagged")["b"]
    with stowage.create(cache_location(tmp_path, "arrow", "again"), backend="arrow",
                        schema={"b": ("bfloat16", [4])}) as again:
        again.put("x", {"b": copy})
        assert_same_array(again.get("x")["b"], tagged, "bfloat16")


def test_a_bfloat16_field_refuses_other_16_bit_dtypes(tmp_path):
    location = cache_location(tmp_path, "arrow")
    with stowage.create(location, backend="arrow", schema={"b": ("bfloat16", [2])}) as cache:
        for wrong in (np.float16, np.int16, np.float32):
            with pytest.raises(stowage.SchemaMismatchError) as info:
                cache.put("k", {"b": np.zeros(2, dtype=wrong)})
            assert info.value.field == "b"
        assert "k" not in cache


# ---------------------------------------------------------------------------------------------
# Shape rules.


def test_ragged_leading_dimension(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"r": ("float32", [None, 3]), "x": ("int32", [2])}
    if refused_unless_documented(location, backend, schema, "ragged"):
        return
    rows = {f"r{n}": tensor("float32", [n, 3], n) for n in (0, 1, 5, 2)}
    with stowage.create(location, backend=backend, schema=schema) as cache:
        assert capability(cache, "ragged") is True
        for i, (key, r) in enumerate(rows.items()):
            cache.put(key, {"r": r, "x": np.array([i, i], dtype=np.int32)})
        with pytest.raises(stowage.SchemaMismatchError) as info:
            cache.put("bad", {"r": np.zeros((2, 4), np.float32), "x": np.zeros(2, np.int32)})
        assert info.value.field == "r"
    with stowage.open(location) as cache:
        assert cache.schema["r"]["rule"] == "ragged_leading"
        assert cache.schema["r"]["shape"] == [None, 3]
        for key, r in rows.items():
            assert_same_array(cache.get(key)["r"], r, what=f"{backend} {key}")
        # Different shapes: get_batch gives a list of the values; x stacks.
        batch = cache.get_batch(list(rows))
        assert isinstance(batch["r"], list) and len(batch["r"]) == len(rows)
        for got, want in zip(batch["r"], rows.values()):
            assert_same_array(got, want)
        assert batch["x"].shape == (len(rows), 2)


def test_max_shape(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"v": {"dtype": "int64", "max_shape": [6, 2]}}
    if refused_unless_documented(location, backend, schema, "variable_shapes"):
        return
    values = {f"v{i}": tensor("int64", shape, i)
              for i, shape in enumerate([(6, 2), (0, 2), (3, 1), (1, 2)])}
    with stowage.create(location, backend=backend, schema=schema) as cache:
        assert capability(cache, "variable_shapes") is True
        for key, v in values.items():
            cache.put(key, {"v": v})
        with pytest.raises(stowage.SchemaMismatchError) as info:
            cache.put("big", {"v": np.zeros((7, 2), dtype=np.int64)})
        assert info.value.field == "v"
        assert "big" not in cache
    with stowage.open(location) as cache:
        assert cache.schema["v"]["rule"] == "max"
        assert cache.schema["v"]["shape"] == [6, 2]
        for key, v in values.items():
            assert_same_array(cache.get(key)["v"], v, what=f"{backend} {key}")


def test_any_shape_round_trips_or_is_refused_at_create(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"a": ("float32", None)}
    values = {f"a{i}": tensor("float32", shape, i)
              for i, shape in enumerate([(), (2, 3, 4), (7,), (0, 5)])}
    try:
        cache = stowage.create(location, backend=backend, schema=schema)
    except stowage.UnsupportedError:
        assert backend != "arrow", "torchcachex caches hold any shape"
        return
    with cache:
        for key, v in values.items():
            cache.put(key, {"a": v})
    with stowage.open(location) as cache:
        assert cache.schema["a"]["rule"] == "any"
        assert cache.schema["a"]["shape"] is None
        for key, v in values.items():
            assert_same_array(cache.get(key)["a"], v, what=f"{backend} {key}")


# ---------------------------------------------------------------------------------------------
# Bytes, JSON and nullable fields.

BYTES_VALUES = [b"", b"\x00\xff\x10 STOWAGE bytes \x00", bytes(range(256)) * 3]


def test_bytes_field(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"x": ("float32", [2]), "b": "bytes"}
    if refused_unless_documented(location, backend, schema, "bytes"):
        return
    kinds = [bytes, bytearray, memoryview]
    with stowage.create(location, backend=backend, schema=schema) as cache:
        assert capability(cache, "bytes") is True
        for i, value in enumerate(BYTES_VALUES):
            wrapped = kinds[i % 3](value) if kinds[i % 3] is not memoryview else memoryview(value)
            cache.put(f"b{i}", {"x": np.full(2, i, np.float32), "b": wrapped})
    with stowage.open(location) as cache:
        assert cache.schema["b"]["kind"] == "bytes"
        for i, value in enumerate(BYTES_VALUES):
            got = cache.get(f"b{i}")
            assert_value(got["b"], value, what=f"{backend} b{i}")
        batch = cache.get_batch([f"b{i}" for i in range(len(BYTES_VALUES))])
        assert batch["b"] == BYTES_VALUES
        assert batch["x"].shape == (len(BYTES_VALUES), 2)


def test_json_field(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"x": ("float32", [2]), "j": "json"}
    if refused_unless_documented(location, backend, schema, "json"):
        return
    text = '{"name": "caf\\u00e9", "n": [1, 2, 3]}'
    obj = {"a": [1, 2.5, None, True], "b": {"c": "ümlaut"}}
    with stowage.create(location, backend=backend, schema=schema) as cache:
        assert capability(cache, "json") is True
        cache.put("text", {"x": np.zeros(2, np.float32), "j": text})
        cache.put("obj", {"x": np.ones(2, np.float32), "j": obj})
        cache.put("list", {"x": np.ones(2, np.float32), "j": [1, "two", 3.0]})
    with stowage.open(location) as cache:
        assert cache.schema["j"]["kind"] == "json"
        got = cache.get("text")["j"]
        assert isinstance(got, str)
        assert got == text, "JSON text comes back as written"
        got = cache.get("obj")["j"]
        assert isinstance(got, str)
        assert json.loads(got) == obj
        assert json.loads(cache.get("list")["j"]) == [1, "two", 3.0]


def test_nullable_tensor_and_json_fields(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {
        "x": ("float32", [2]),
        "maybe": {"dtype": "float32", "shape": [3], "nullable": True},
    }
    if DOCUMENTED[backend]["json"]:
        schema["maybe_json"] = {"kind": "json", "nullable": True}
    if refused_unless_documented(location, backend, schema, "nullable"):
        return
    samples = {
        "full": {"x": np.zeros(2, np.float32), "maybe": np.array([1, 2, 3], np.float32)},
        "null": {"x": np.ones(2, np.float32), "maybe": None},
    }
    if "maybe_json" in schema:
        samples["full"]["maybe_json"] = '{"k": 1}'
        samples["null"]["maybe_json"] = None
    with stowage.create(location, backend=backend, schema=schema) as cache:
        assert capability(cache, "nullable") is True
        for key, sample in samples.items():
            cache.put(key, sample)
        with pytest.raises(stowage.SchemaMismatchError) as info:
            cache.put("x-null", {**samples["full"], "x": None})
        assert info.value.field == "x", "a non-nullable field refuses None"
    with stowage.open(location) as cache:
        assert cache.schema["maybe"]["nullable"] is True
        assert cache.schema["x"]["nullable"] is False
        for key, sample in samples.items():
            got = cache.get(key)
            for field, want in sample.items():
                assert_value(got[field], want, what=f"{backend} {key} {field}")
        batch = cache.get_batch(["full", "null"])
        assert isinstance(batch["maybe"], list), "a null among tensors: a list"
        assert batch["maybe"][1] is None
        assert_same_array(batch["maybe"][0], samples["full"]["maybe"])


def test_capabilities_agree_with_the_documented_table(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    build_small(location, backend)
    with stowage.open(location) as cache:
        for name in ("variable_shapes", "ragged", "nullable", "bytes", "json", "zero_copy"):
            assert capability(cache, name) is DOCUMENTED[backend][name], f"{backend} {name}"


# ---------------------------------------------------------------------------------------------
# Reads.


def test_keys_len_contains_and_getitem(small_cache, backend):
    with stowage.open(small_cache) as cache:
        assert sorted(cache.keys()) == [small_key(i) for i in range(N_SMALL)]
        assert isinstance(cache.keys(), list)
        assert len(cache) == N_SMALL
        assert small_key(3) in cache
        assert "nope" not in cache
        got = cache[small_key(3)]
        assert_same_array(got["x"], small_sample(3)["x"])
        assert_same_array(got["y"], small_sample(3)["y"])


def test_attributes_of_a_read_handle(small_cache, backend):
    with stowage.open(small_cache) as cache:
        assert cache.backend == backend
        assert isinstance(cache.format, str) and cache.format
        assert cache.mode == "r"
        assert cache.checks is True
        assert cache.finalized is True
        assert cache.closed is False
        assert isinstance(cache.path, str)
        if backend != "remote":
            assert cache.path.rstrip("/") == small_cache.rstrip("/")
        assert cache.schema == {
            "x": {**cache.schema["x"], "kind": "tensor", "dtype": "float32", "shape": [4, 3],
                  "rule": "fixed", "nullable": False},
            "y": {**cache.schema["y"], "kind": "tensor", "dtype": "int64", "shape": [2],
                  "rule": "fixed", "nullable": False},
        }
    assert cache.closed is True


def test_capabilities_is_a_dict_of_the_rust_capabilities(small_cache, backend):
    # The keys are stowage_core::Capabilities' field names: flags as bools, the dtypes as
    # names, the limits as ints or None.
    with stowage.open(small_cache) as cache:
        caps = cache.capabilities
        assert isinstance(caps, dict)
        assert "zero_copy_get" in caps, sorted(caps)
        limits = {"max_rank", "max_key_bytes", "max_fields"}
        flags = {k: v for k, v in caps.items() if k not in limits | {"dtypes"}}
        not_bool = {k: v for k, v in flags.items() if not isinstance(v, bool)}
        assert not_bool == {}, f"capability flags are bools; these are not: {not_bool}"
        assert set(caps["dtypes"]) <= set(stowage.DTYPES) and "float32" in caps["dtypes"]
        for name in limits:
            assert caps[name] is None or isinstance(caps[name], int), (name, caps[name])


def test_get_batch_stacks_into_a_new_writable_array(small_cache, backend):
    keys = [small_key(i) for i in (5, 0, 17, 5)]
    with stowage.open(small_cache) as cache:
        batch = cache.get_batch(keys)
        assert list(batch) == ["x", "y"]
        want_x = np.stack([small_sample(int(k[1:]))["x"] for k in keys])
        assert_same_array(batch["x"], want_x)
        assert_same_array(batch["y"], np.stack([small_sample(int(k[1:]))["y"] for k in keys]))
        assert batch["x"].flags.writeable is True
        batch["x"][0] = -1  # its own memory
        assert_same_array(cache.get(keys[0])["x"], small_sample(5)["x"])
        empty = cache.get_batch([])
        assert all(len(v) == 0 for v in empty.values())


def test_get_batch_into_fills_only_the_named_fields(small_cache, backend):
    keys = [small_key(i) for i in range(N_SMALL - 1, -1, -3)]
    with stowage.open(small_cache) as cache:
        out = {"x": np.full((len(keys), 4, 3), np.nan, dtype=np.float32)}
        assert cache.get_batch_into(keys, out) is None
        want = np.stack([small_sample(int(k[1:]))["x"] for k in keys])
        assert_same_array(out["x"], want)
        assert set(out) == {"x"}
        y = {"y": np.zeros((len(keys), 2), dtype=np.int64)}
        cache.get_batch_into(keys, y)
        assert_same_array(y["y"], np.stack([small_sample(int(k[1:]))["y"] for k in keys]))


def test_a_writable_handle_reads_what_it_put(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        for i in range(5):
            cache.put(small_key(i), small_sample(i))
        assert len(cache) == 5
        assert_same_array(cache.get(small_key(2))["x"], small_sample(2)["x"])
        cache.flush()
        assert_same_array(cache.get(small_key(4))["y"], small_sample(4)["y"])
        assert sorted(cache.keys()) == [small_key(i) for i in range(5)]


# ---------------------------------------------------------------------------------------------
# Writes.


def test_put_batch_takes_a_mapping_or_pairs(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        cache.put_batch({small_key(i): small_sample(i) for i in range(0, 5)})
        cache.put_batch([(small_key(i), small_sample(i)) for i in range(5, 10)])
        cache.put_batch((small_key(i), small_sample(i)) for i in range(10, 12))
    with stowage.open(location) as cache:
        assert sorted(cache.keys()) == [small_key(i) for i in range(12)]
        for i in range(12):
            assert_same_array(cache.get(small_key(i))["x"], small_sample(i)["x"])


def test_non_contiguous_arrays_are_copied_not_refused(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    big = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    x = big[:, ::2]  # (4, 3), not contiguous
    assert not x.flags.c_contiguous
    y = np.arange(4, dtype=np.int64)[::2]
    fortran = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        cache.put("strided", {"x": x, "y": y})
        cache.put("fortran", {"x": fortran, "y": y})
    with stowage.open(location) as cache:
        assert_same_array(cache.get("strided")["x"], np.ascontiguousarray(x))
        assert_same_array(cache.get("strided")["y"], np.array([0, 2], np.int64))
        assert_same_array(cache.get("fortran")["x"], np.ascontiguousarray(fortran))


def test_a_key_already_there_follows_the_overwrite_capability(tmp_path, backend):
    # The contract (put.existing-key-follows-overwrite): replaced when the backend declares
    # overwrite, else UnsupportedError and the old value stays.
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        overwrite = cache.capabilities["overwrite"]
        cache.put("k", small_sample(1))
        cache.flush()
        if overwrite:
            cache.put("k", small_sample(2))
            want = small_sample(2)
        else:
            with pytest.raises(stowage.UnsupportedError):
                cache.put("k", small_sample(2))
            want = small_sample(1)
        assert_same_array(cache.get("k")["x"], want["x"])
    with stowage.open(location) as cache:
        assert_same_array(cache.get("k")["x"], want["x"])
        assert len(cache) == 1


def test_a_read_handle_refuses_writes(small_cache, backend):
    with stowage.open(small_cache) as cache:
        with pytest.raises(stowage.UnsupportedError):
            cache.put("new", small_sample(0))
        with pytest.raises(stowage.UnsupportedError):
            cache.put_batch({"new": small_sample(0)})
        assert "new" not in cache


def test_append_mode_adds_to_an_unfinished_cache(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    build_small(location, backend, n=6, finalize=False)
    with stowage.open(location, mode="a") as cache:
        assert cache.mode == "a"
        assert cache.finalized is False
        for i in range(6, 10):
            cache.put(small_key(i), small_sample(i))
    with stowage.open(location) as cache:
        assert sorted(cache.keys()) == [small_key(i) for i in range(10)]
        for i in range(10):
            assert_same_array(cache.get(small_key(i))["x"], small_sample(i)["x"])


def test_finalize_sets_finalized_and_a_backend_without_append_after_finalize_refuses(tmp_path):
    location = cache_location(tmp_path, "memmap")
    cache = stowage.create(location, backend="memmap", schema=small_schema())
    cache.put("a", small_sample(0))
    assert cache.finalized is False
    cache.finalize()
    assert cache.finalized is True
    with pytest.raises(stowage.FinalizedError):
        cache.put("b", small_sample(1))
    cache.close()
    with stowage.open(location) as cache:
        assert cache.finalized is True
        assert cache.keys() == ["a"]


def test_create_where_a_cache_is_raises_cache_exists(small_cache, backend):
    with pytest.raises(stowage.CacheExistsError) as info:
        stowage.create(small_cache, backend=backend, schema=small_schema())
    assert isinstance(info.value, FileExistsError)
    with stowage.open(small_cache) as cache:
        assert len(cache) == N_SMALL, "nothing was lost"


def test_validate_a_clean_cache(small_cache, backend):
    with stowage.open(small_cache) as cache:
        report = cache.validate()
        assert report.clean is True, report.problems
        assert report.undamaged is True
        assert report.samples_checked == N_SMALL
        assert report.files_checked >= 1
        assert list(report.problems) == []
        assert list(report.unchecked) == []
        structure = cache.validate(level="structure")
        assert structure.undamaged is True
        with pytest.raises(stowage.InvalidArgumentError):
            cache.validate(level="thorough")


def test_create_accepts_pathlike_and_defaults_to_arrow(tmp_path):
    with stowage.create(tmp_path / "p", schema=small_schema()) as cache:
        assert cache.backend == "arrow"
        cache.put("a", small_sample(0))
    with stowage.open(tmp_path / "p") as cache:
        assert cache.keys() == ["a"]


def test_create_accepts_known_options(tmp_path):
    with stowage.create(tmp_path / "a", backend="arrow", schema=small_schema(), flush_every=4,
                        compression="zstd") as cache:
        for i in range(10):
            cache.put(small_key(i), small_sample(i))
    with stowage.open(tmp_path / "a") as cache:
        assert len(cache) == 10
        assert_same_array(cache.get(small_key(9))["x"], small_sample(9)["x"])
    with stowage.create(tmp_path / "n", backend="npy", schema=small_schema(),
                        collection_size=4, checks=False) as cache:
        assert cache.checks is False
        for i in range(10):
            cache.put(small_key(i), small_sample(i))
    with stowage.open(tmp_path / "n") as cache:
        assert_same_array(cache.get(small_key(9))["x"], small_sample(9)["x"])


def test_schema_accepts_numpy_dtypes_and_dict_forms(tmp_path):
    schema = {
        "a": (np.float32, [2]),
        "b": {"dtype": "int16", "shape": [3]},
        "c": {"kind": "tensor", "dtype": np.dtype("uint8"), "shape": [1]},
    }
    with stowage.create(tmp_path / "c", backend="arrow", schema=schema) as cache:
        assert [cache.schema[f]["dtype"] for f in "abc"] == ["float32", "int16", "uint8"]
        cache.put("k", {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.int16),
                        "c": np.zeros(1, np.uint8)})


# ---------------------------------------------------------------------------------------------
# The context manager.


def test_a_clean_exit_flushes_and_closes(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        assert cache.closed is False
        for i in range(3):
            cache.put(small_key(i), small_sample(i))
    assert cache.closed is True
    with stowage.open(location) as reopened:
        assert sorted(reopened.keys()) == [small_key(i) for i in range(3)]
        assert_same_array(reopened.get(small_key(2))["x"], small_sample(2)["x"])


def test_finalize_inside_the_with_block_then_a_clean_exit(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema=small_schema()) as cache:
        cache.put("a", small_sample(0))
        cache.finalize()
    assert cache.closed is True
    with stowage.open(location) as reopened:
        assert reopened.finalized is True
        assert reopened.keys() == ["a"]


def test_an_exception_inside_closes_and_propagates(tmp_path, backend):
    location = cache_location(tmp_path, backend)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with stowage.create(location, backend=backend, schema=small_schema()) as cache:
            cache.put("a", small_sample(0))
            raise Boom()
    assert cache.closed is True
    # Flushed data must be there; unflushed data may or may not be: the cache opens either way.
    with stowage.open(location) as reopened:
        assert set(reopened.keys()) <= {"a"}


def test_flushed_data_survives_an_exception(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with pytest.raises(RuntimeError):
        with stowage.create(location, backend=backend, schema=small_schema()) as cache:
            cache.put("a", small_sample(0))
            cache.flush()
            raise RuntimeError("after the flush")
    with stowage.open(location) as reopened:
        assert reopened.keys() == ["a"]


# ---------------------------------------------------------------------------------------------
# Pickling.


def test_a_read_handle_pickles_by_path(small_cache, backend):
    with stowage.open(small_cache, checks=False) as cache:
        checks = cache.checks
        clone = pickle.loads(pickle.dumps(cache))
    try:
        assert clone.closed is False
        assert clone.mode == "r"
        assert clone.checks == checks
        assert sorted(clone.keys()) == [small_key(i) for i in range(N_SMALL)]
        assert_same_array(clone.get(small_key(7))["x"], small_sample(7)["x"])
    finally:
        clone.close()


def test_a_writable_handle_does_not_pickle(tmp_path):
    with stowage.create(tmp_path / "w", backend="arrow", schema=small_schema()) as cache:
        with pytest.raises((stowage.UnsupportedError, TypeError)):
            pickle.dumps(cache)


def test_checks_attribute(small_cache, backend):
    with stowage.open(small_cache, checks=False) as cache:
        if backend in ("memmap", "arrow", "npy"):
            assert cache.checks is False
        else:
            assert cache.checks is True, f"{backend} always checks: checks reports what is in force"
        assert len(cache) == N_SMALL
        assert_same_array(cache.get(small_key(1))["x"], small_sample(1)["x"])


UNUSUAL_KEYS = ["a:b", "x/y", "with space", "new\nline", "\u00e9\U0001f642\u043a\u043b\u044e\u0447",
                "../etc", "k" * 5000, "nul\x00byte", "10:uid:0123456789abcdef:0:3 4"]


def test_unusual_keys_round_trip(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend, schema={"x": ("int32", [1])}) as cache:
        for i, key in enumerate(UNUSUAL_KEYS):
            cache.put(key, {"x": np.array([i], np.int32)})
        cache.finalize()
    with stowage.open(location) as cache:
        assert sorted(cache.keys()) == sorted(UNUSUAL_KEYS)
        for i, key in enumerate(UNUSUAL_KEYS):
            assert key in cache
            assert int(cache.get(key)["x"][0]) == i, repr(key)
        assert "a:" not in cache and "k" * 4999 not in cache


def test_nan_payloads_signed_zeros_and_subnormals_keep_their_bits(tmp_path, backend):
    f32 = np.array([0x7FC00001, 0x7F800001, 0xFFC12345, 0x80000000, 0x00000001, 0x7F800000],
                   np.uint32).view(np.float32)
    f16 = np.array([0x7E01, 0x7C01, 0xFE00, 0x8000, 0x0001, 0xFC00], np.uint16).view(np.float16)
    f64 = np.array([0x7FF8000000000001, 0x7FF0000000000001, 0x8000000000000000, 1, 2, 3],
                   np.uint64).view(np.float64)
    location = cache_location(tmp_path, backend)
    schema = {"f32": ("float32", [6]), "f16": ("float16", [6]), "f64": ("float64", [6])}
    with stowage.create(location, backend=backend, schema=schema) as cache:
        cache.put("nan", {"f32": f32, "f16": f16, "f64": f64})
    with stowage.open(location) as cache:
        got = cache.get("nan")
        for name, want in (("f32", f32), ("f16", f16), ("f64", f64)):
            assert got[name].tobytes() == want.tobytes(), (
                f"{backend} {name}: {got[name].view(np.uint8).tobytes().hex()} != "
                f"{want.view(np.uint8).tobytes().hex()}"
            )
        out = {"f32": np.zeros((2, 6), np.float32)}
        cache.get_batch_into(["nan", "nan"], out)
        assert out["f32"].tobytes() == f32.tobytes() * 2


def test_nullable_bytes_field(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"x": ("uint8", [1]), "b": {"kind": "bytes", "nullable": True}}
    if not (DOCUMENTED[backend]["bytes"] and DOCUMENTED[backend]["nullable"]):
        with pytest.raises(stowage.UnsupportedError):
            stowage.create(location, backend=backend, schema=schema)
        return
    with stowage.create(location, backend=backend, schema=schema) as cache:
        cache.put("some", {"x": np.zeros(1, np.uint8), "b": b"\x00blob"})
        cache.put("none", {"x": np.ones(1, np.uint8), "b": None})
        cache.put("empty", {"x": np.ones(1, np.uint8), "b": b""})
    with stowage.open(location) as cache:
        assert cache.get("some")["b"] == b"\x00blob"
        assert cache.get("none")["b"] is None
        assert cache.get("empty")["b"] == b"", "empty bytes are not null"
        assert cache.get_batch(["some", "none", "empty"])["b"] == [b"\x00blob", None, b""]


def test_bfloat16_out_arrays_may_carry_the_metadata(tmp_path):
    location = cache_location(tmp_path, "npy")
    with stowage.create(location, backend="npy", schema={"b": ("bfloat16", [2])}) as cache:
        cache.put("a", {"b": np.array([1, 2], np.uint16)})
        cache.put("c", {"b": np.array([3, 4], np.uint16)})
    with stowage.open(location) as cache:
        tagged = np.zeros((2, 2), np.dtype(np.uint16, metadata={"stowage_dtype": "bfloat16"}))
        cache.get_batch_into(["a", "c"], {"b": tagged})
        assert tagged.tolist() == [[1, 2], [3, 4]]
        plain = np.zeros((2, 2), np.uint16)
        cache.get_batch_into(["c", "a"], {"b": plain})
        assert plain.tolist() == [[3, 4], [1, 2]]
        with pytest.raises(stowage.InvalidArgumentError):
            cache.get_batch_into(["a"], {"b": np.zeros((1, 2), np.float16)})


def test_rank_limits(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    shape = [1] * 31 + [2]  # rank 32; NUMPY_10 (hangar) allows at most 31
    schema = {"x": ("float32", shape)}
    if backend == "npy":
        with pytest.raises(stowage.UnsupportedError) as info:
            stowage.create(location, backend=backend, schema=schema)
        assert "31" in str(info.value)
        return
    value = np.arange(2, dtype=np.float32).reshape(shape)
    with stowage.create(location, backend=backend, schema=schema) as cache:
        cache.put("k", {"x": value})
    with stowage.open(location) as cache:
        assert_same_array(cache.get("k")["x"], value)


def test_zero_size_dimensions(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    schema = {"x": ("float32", [0, 3]), "y": ("int8", [2])}
    with stowage.create(location, backend=backend, schema=schema) as cache:
        for key in ("a", "b"):
            cache.put(key, {"x": np.zeros((0, 3), np.float32), "y": np.ones(2, np.int8)})
    with stowage.open(location) as cache:
        assert cache.get("a")["x"].shape == (0, 3)
        assert cache.get_batch(["a", "b"])["x"].shape == (2, 0, 3)
        out = {"x": np.zeros((2, 0, 3), np.float32), "y": np.zeros((2, 2), np.int8)}
        cache.get_batch_into(["a", "b"], out)
        assert out["y"].tolist() == [[1, 1], [1, 1]]


def test_flushed_samples_survive_a_killed_writer_and_the_cache_resumes(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    run = run_python(f"""
        import os, signal
        import numpy as np
        import stowage
        cache = stowage.create({location!r}, backend={backend!r},
                               schema={{"x": ("float32", [4, 3]), "y": ("int64", [2])}})
        for i in range(10):
            cache.put(f"k{{i:03d}}", {{"x": np.arange(12, dtype=np.float32).reshape(4, 3) + np.float32(i * 100),
                                       "y": np.array([i, -i * 7], dtype=np.int64)}})
        cache.flush()
        for i in range(10, 15):
            cache.put(f"k{{i:03d}}", {{"x": np.zeros((4, 3), np.float32), "y": np.zeros(2, np.int64)}})
        print("flushed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert "flushed" in run.stdout, run
    assert run.returncode == -9, run
    with stowage.open(location) as cache:
        keys = set(cache.keys())
        assert {small_key(i) for i in range(10)} <= keys, sorted(keys)
        for i in range(10):
            assert_same_array(cache.get(small_key(i))["x"], small_sample(i)["x"])
    with stowage.open(location, mode="a") as cache:
        assert cache.finalized is False
        for i in range(15, 20):
            cache.put(small_key(i), small_sample(i))
        cache.finalize()
    with stowage.open(location) as cache:
        assert cache.finalized is True
        for i in list(range(10)) + list(range(15, 20)):
            assert_same_array(cache.get(small_key(i))["y"], small_sample(i)["y"])
        assert cache.validate().undamaged is True


def test_a_memory_url_round_trips_within_the_process():
    import uuid

    url = f"memory://pytest/{uuid.uuid4().hex}"
    with stowage.create(url, backend="remote", schema=small_schema()) as cache:
        for i in range(3):
            cache.put(small_key(i), small_sample(i))
    with stowage.open(url) as cache:
        assert cache.backend == "remote"
        assert sorted(cache.keys()) == [small_key(i) for i in range(3)]
        assert_same_array(cache.get(small_key(2))["x"], small_sample(2)["x"])


@pytest.mark.parametrize("url", ["file:///nonexistent-stowage-pytest/c", "memory://pytest/none"])
def test_a_url_without_a_cache_is_cache_not_found(url):
    with pytest.raises(stowage.CacheNotFoundError) as info:
        stowage.open(url)
    assert url in str(info.value)


def test_numpy_dtype_names_the_arrays_of_each_dtype():
    # Documented in the package README (for allocating get_batch_into's arrays).
    for name in DTYPES:
        dtype = stowage.numpy_dtype(name)
        assert dtype == np_dtype(name), name
        if name == "bfloat16":
            assert dtype.metadata == BF16_META
        else:
            assert not dtype.metadata
    with pytest.raises(stowage.InvalidArgumentError):
        stowage.numpy_dtype("float31")


APPEND_AFTER_FINALIZE = {"arrow": True, "hdf5": True, "memmap": False, "npy": False, "remote": False}


def test_append_after_finalize_or_finalized_error(tmp_path, backend):
    location = build_small(cache_location(tmp_path, backend), backend, n=3)
    with stowage.open(location, mode="a") as cache:
        assert cache.finalized is True
        assert cache.capabilities["append_after_finalize"] is APPEND_AFTER_FINALIZE[backend]
        if APPEND_AFTER_FINALIZE[backend]:
            cache.put("new", small_sample(9))
        else:
            with pytest.raises(stowage.FinalizedError) as info:
                cache.put("new", small_sample(9))
            assert isinstance(info.value, stowage.StowageError)
    with stowage.open(location) as cache:
        assert len(cache) == 3 + APPEND_AFTER_FINALIZE[backend]
        if APPEND_AFTER_FINALIZE[backend]:
            assert_same_array(cache.get("new")["x"], small_sample(9)["x"])


def test_paths_with_spaces_and_non_ascii(tmp_path, backend):
    parent = tmp_path / "dir with space \u00e9 \U0001f642"
    parent.mkdir()
    location = build_small(cache_location(parent, backend, "c \u00fc"), backend, n=3)
    with stowage.open(location) as cache:
        clone = pickle.loads(pickle.dumps(cache))
        assert len(cache) == 3
        assert cache.validate().clean is True
    with clone:
        assert_same_array(clone.get(small_key(1))["x"], small_sample(1)["x"])


def test_four_mebibyte_samples(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(3)]
    with stowage.create(location, backend=backend, schema={"x": ("float32", [1024, 1024])}) as cache:
        for i, v in enumerate(values):
            cache.put(f"k{i}", {"x": v})
    with stowage.open(location) as cache:
        for i, v in enumerate(values):
            assert cache.get(f"k{i}")["x"].tobytes() == v.tobytes()
        out = {"x": np.empty((3, 1024, 1024), np.float32)}
        cache.get_batch_into(["k2", "k0", "k1"], out)
        assert out["x"].tobytes() == values[2].tobytes() + values[0].tobytes() + values[1].tobytes()
        assert cache.validate().clean is True


def test_three_thousand_keys_over_many_flushes(tmp_path, backend):
    # Many flushes make many key-index runs (and segments): every key is still found once.
    location = cache_location(tmp_path, backend)
    n = 3000
    cache = stowage.create(location, backend=backend, schema={"x": ("int64", [1])})
    for i in range(n):
        cache.put(f"key-{i:05d}", {"x": np.array([i], np.int64)})
        if i % 97 == 96:
            cache.flush()
    cache.finalize()
    cache.close()
    with stowage.open(location) as cache:
        assert len(cache) == n
        keys = cache.keys()
        assert len(keys) == n and set(keys) == {f"key-{i:05d}" for i in range(n)}
        out = {"x": np.empty((n, 1), np.int64)}
        cache.get_batch_into([f"key-{i:05d}" for i in range(n)], out)
        assert (out["x"][:, 0] == np.arange(n)).all()
        assert "key-99999" not in cache and "key-0000" not in cache
        assert cache.validate().clean is True
