"""Bad arguments, missing keys, closed handles, locks and Rust panics: each is the documented
exception, with the documented attributes, and the interpreter carries on."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import stowage
import stowage._stowage
from conftest import (
    assert_same_array,
    build_small,
    cache_location,
    run_python,
    small_key,
    small_sample,
    small_schema,
)


# ---------------------------------------------------------------------------------------------
# open / create arguments.


@pytest.mark.parametrize("mode", ["w", "rw", "", "R", "r+", "x"])
def test_open_with_a_wrong_mode_is_invalid_argument(arrow_small, mode):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        stowage.open(arrow_small, mode=mode)
    assert isinstance(info.value, ValueError)
    assert repr(mode) in str(info.value) or mode in str(info.value)


def test_open_a_path_that_is_no_cache(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(stowage.StowageError) as info:
        stowage.open(missing)
    assert str(missing) in str(info.value)
    if isinstance(info.value, stowage.CacheNotFoundError):
        assert isinstance(info.value, FileNotFoundError)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(stowage.StowageError) as info:
        stowage.open(empty)
    assert str(empty) in str(info.value)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(stowage.StowageError) as info:
        stowage.open(junk)
    assert str(junk) in str(info.value)


def test_an_unknown_backend_is_invalid_argument_naming_the_backends(tmp_path):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        stowage.create(tmp_path / "c", backend="parquet", schema=small_schema())
    message = str(info.value)
    assert "parquet" in message
    for name in ("arrow", "memmap", "npy", "hdf5", "remote"):
        assert name in message
    assert not (tmp_path / "c").exists(), "nothing created"


def test_an_unknown_create_option_is_invalid_argument_listing_the_accepted_ones(tmp_path):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        stowage.create(tmp_path / "c", backend="arrow", schema=small_schema(), flush_evry=3)
    message = str(info.value)
    assert "flush_evry" in message
    assert "flush_every" in message, "the accepted options are listed"
    with pytest.raises(stowage.InvalidArgumentError) as info:
        stowage.create(tmp_path / "m", backend="memmap", schema=small_schema(), collection_size=3)
    assert "collection_size" in str(info.value)


def test_an_option_of_the_wrong_type_is_invalid_argument(tmp_path):
    with pytest.raises(stowage.InvalidArgumentError):
        stowage.create(tmp_path / "c", backend="arrow", schema=small_schema(), flush_every="many")
    with pytest.raises(stowage.InvalidArgumentError):
        stowage.create(tmp_path / "c", backend="arrow", schema=small_schema(), compression="gzip")


@pytest.mark.parametrize(
    "schema",
    [
        None,
        {},
        {"x": ("float31", [2])},
        {"x": ("float32", [2], "extra")},
        {"x": "tensor"},
        {"x": {"dtype": "float32", "shape": [2], "max_shape": [3]}},
        {"x": {"dtype": "float32", "colour": "red"}},
        {"x": ("float32", ["two"])},
        {1: ("float32", [2])},
        [("x", ("float32", [2]))],
    ],
    ids=["none", "empty", "bad-dtype", "3-tuple", "bad-kind", "shape-and-max", "unknown-key",
         "str-dim", "int-name", "list"],
)
def test_a_bad_schema_is_invalid_argument(tmp_path, schema):
    with pytest.raises(stowage.InvalidArgumentError):
        stowage.create(tmp_path / "c", backend="arrow", schema=schema)


# ---------------------------------------------------------------------------------------------
# put.


@pytest.fixture
def writable(tmp_path):
    cache = stowage.create(tmp_path / "w", backend="arrow", schema=small_schema())
    yield cache
    cache.close()


def test_put_of_a_wrong_dtype_names_the_field_and_both_dtypes(writable):
    sample = small_sample(0)
    sample["x"] = sample["x"].astype(np.float64)
    with pytest.raises(stowage.SchemaMismatchError) as info:
        writable.put("k", sample)
    error = info.value
    assert isinstance(error, ValueError)
    assert error.field == "x"
    assert "float32" in str(error) and "float64" in str(error), str(error)
    assert "k" not in writable, "nothing was written"


def test_put_never_casts_integers(writable):
    sample = small_sample(0)
    sample["y"] = sample["y"].astype(np.int32)
    with pytest.raises(stowage.SchemaMismatchError) as info:
        writable.put("k", sample)
    assert info.value.field == "y"
    assert "int64" in str(info.value) and "int32" in str(info.value)


def test_put_of_a_wrong_shape_names_the_field_and_both_shapes(tmp_path):
    with stowage.create(tmp_path / "s", backend="arrow",
                        schema={"a": ("float32", [7, 3]), "b": ("int8", [5])}) as cache:
        with pytest.raises(stowage.SchemaMismatchError) as info:
            cache.put("k", {"a": np.zeros((11, 3), np.float32), "b": np.zeros(5, np.int8)})
        assert info.value.field == "a"
        assert "7" in str(info.value) and "11" in str(info.value), str(info.value)
        with pytest.raises(stowage.SchemaMismatchError) as info:
            cache.put("k", {"a": np.zeros((7, 3), np.float32), "b": np.zeros((5, 1), np.int8)})
        assert info.value.field == "b"
        assert len(cache) == 0


def test_put_with_a_missing_field(writable):
    with pytest.raises(stowage.SchemaMismatchError) as info:
        writable.put("k", {"x": small_sample(0)["x"]})
    assert info.value.field == "y"
    assert "k" not in writable


def test_put_with_an_extra_field(writable):
    with pytest.raises(stowage.SchemaMismatchError) as info:
        writable.put("k", {**small_sample(0), "zzz": np.zeros(1)})
    assert info.value.field == "zzz"
    assert "k" not in writable


def test_put_of_a_non_array_value(writable):
    with pytest.raises((stowage.SchemaMismatchError, TypeError)):
        writable.put("k", {"x": [[0.0] * 3] * 4, "y": small_sample(0)["y"]})
    with pytest.raises((stowage.SchemaMismatchError, TypeError)):
        writable.put("k", {"x": b"bytes", "y": small_sample(0)["y"]})
    assert "k" not in writable


def test_put_of_a_non_mapping_sample(writable):
    with pytest.raises((TypeError, stowage.SchemaMismatchError, stowage.InvalidArgumentError)):
        writable.put("k", [small_sample(0)["x"], small_sample(0)["y"]])


def test_put_refuses_a_byte_swapped_array_instead_of_storing_wrong_bytes(writable):
    sample = small_sample(0)
    sample["x"] = sample["x"].astype(">f4")
    with pytest.raises(stowage.SchemaMismatchError) as info:
        writable.put("k", sample)
    assert info.value.field == "x"
    assert "k" not in writable


def test_the_empty_key_is_invalid(writable):
    with pytest.raises(stowage.InvalidArgumentError):
        writable.put("", small_sample(0))
    assert len(writable) == 0


@pytest.mark.parametrize("key", [5, None, b"k", 1.5, ("k",)])
def test_a_non_str_key_is_refused(writable, key):
    with pytest.raises((TypeError, stowage.InvalidArgumentError)):
        writable.put(key, small_sample(0))
    with pytest.raises((TypeError, stowage.InvalidArgumentError)):
        writable.get(key)
    assert len(writable) == 0


def test_a_bytes_field_refuses_an_array_and_a_tensor_refuses_bytes(tmp_path):
    with stowage.create(tmp_path / "b", backend="arrow",
                        schema={"b": "bytes", "x": ("uint8", [3])}) as cache:
        with pytest.raises((stowage.SchemaMismatchError, TypeError)) as info:
            cache.put("k", {"b": np.zeros(3, np.uint8), "x": np.zeros(3, np.uint8)})
        if isinstance(info.value, stowage.SchemaMismatchError):
            assert info.value.field == "b"
        with pytest.raises((stowage.SchemaMismatchError, TypeError)):
            cache.put("k", {"b": b"ok", "x": b"abc"})
        assert len(cache) == 0


@pytest.mark.parametrize("backend", ["arrow", "memmap", "hdf5", "remote"])
def test_a_json_field_refuses_text_that_is_not_json(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    with stowage.create(location, backend=backend,
                        schema={"x": ("float32", [1]), "j": "json"}) as cache:
        for text in ("{not json", "", "[1, 2", "{'single': 'quotes'}"):
            with pytest.raises(stowage.SchemaMismatchError) as info:
                cache.put("k", {"x": np.zeros(1, np.float32), "j": text})
            assert info.value.field == "j"
        with pytest.raises((stowage.SchemaMismatchError, TypeError, ValueError)):
            cache.put("k", {"x": np.zeros(1, np.float32), "j": object()})
        assert len(cache) == 0


# ---------------------------------------------------------------------------------------------
# get_batch_into.


@pytest.fixture
def reader(arrow_small):
    cache = stowage.open(arrow_small)
    yield cache
    cache.close()


KEYS3 = [small_key(0), small_key(1), small_key(2)]


def _assert_names_field(info, field, *sides):
    error = info.value
    assert isinstance(error, stowage.InvalidArgumentError), type(error)
    assert isinstance(error, ValueError)
    message = str(error)
    assert field in message, message
    for side in sides:
        assert side in message, f"{side!r} not in {message!r}"


def test_get_batch_into_wrong_shape(reader):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": np.zeros((3, 4, 2), np.float32)})
    _assert_names_field(info, "x")
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": np.zeros((2, 4, 3), np.float32)})
    _assert_names_field(info, "x")


@pytest.mark.parametrize("shape", [(3, 3, 4), (3, 12), (3, 2, 6), (3, 4, 3, 1)])
def test_get_batch_into_a_shape_of_the_same_byte_size_is_still_wrong(reader, shape):
    # The field is (4, 3): an out array of (3, 3, 4) or (3, 12) holds as many bytes per row but
    # is not (len(keys), 4, 3).
    out = np.zeros(shape, np.float32)
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": out})
    _assert_names_field(info, "x")
    assert not out.any(), "nothing written"


def test_get_batch_into_wrong_dtype(reader):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"y": np.zeros((3, 2), np.float64)})
    _assert_names_field(info, "y", "int64", "float64")


def test_get_batch_into_a_read_only_array(reader):
    out = np.zeros((3, 4, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": out})
    _assert_names_field(info, "x")
    assert not out.any(), "nothing written"


def test_get_batch_into_a_non_contiguous_array(reader):
    out = np.zeros((6, 4, 3), np.float32)[::2]
    assert not out.flags.c_contiguous
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": out})
    _assert_names_field(info, "x")


def test_get_batch_into_a_field_not_in_the_schema(reader):
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"nope": np.zeros((3, 1), np.float32)})
    _assert_names_field(info, "nope")


def test_get_batch_into_a_non_array(reader):
    with pytest.raises((stowage.InvalidArgumentError, TypeError)):
        reader.get_batch_into(KEYS3, {"x": [[0.0] * 3] * 4})


def test_get_batch_into_checks_every_field_before_writing(reader):
    good = np.zeros((3, 4, 3), np.float32)
    bad = np.zeros((3, 2), np.int32)
    with pytest.raises(stowage.InvalidArgumentError) as info:
        reader.get_batch_into(KEYS3, {"x": good, "y": bad})
    _assert_names_field(info, "y")
    assert not good.any(), "nothing is written before the arguments are checked"


# ---------------------------------------------------------------------------------------------
# Missing keys.


def test_get_of_a_missing_key_is_key_error(reader):
    with pytest.raises(KeyError) as info:
        reader.get("missing-key")
    assert info.value.args[0] == "missing-key"
    assert not isinstance(info.value, stowage.StowageError) or isinstance(info.value, KeyError)
    with pytest.raises(KeyError) as info:
        reader["missing-key"]
    assert info.value.args[0] == "missing-key"


def test_get_batch_of_a_missing_key_is_key_error_naming_it(reader):
    with pytest.raises(KeyError) as info:
        reader.get_batch([small_key(0), "missing-key", small_key(1)])
    assert "missing-key" in str(info.value)


def test_get_batch_into_of_a_missing_key_is_key_error(reader):
    out = {"x": np.zeros((2, 4, 3), np.float32)}
    with pytest.raises(KeyError) as info:
        reader.get_batch_into([small_key(0), "missing-key"], out)
    assert "missing-key" in str(info.value)


def test_get_batch_into_stops_at_a_missing_key(small_cache, backend):
    # Each row is copied as it is read: the rows before the missing key are written, the ones
    # after it are left as they were.
    out = np.full((3, 4, 3), -1.0, np.float32)
    with stowage.open(small_cache) as cache:
        with pytest.raises(KeyError) as info:
            cache.get_batch_into([small_key(0), "missing-key", small_key(1)], {"x": out})
        assert info.value.args[0] == "missing-key"
        np.testing.assert_array_equal(out[0], cache.get(small_key(0))["x"])
    assert (out[1:] == -1.0).all()


def test_missing_key_on_every_backend(small_cache, backend):
    with stowage.open(small_cache) as cache:
        with pytest.raises(KeyError) as info:
            cache.get("absent")
        assert info.value.args[0] == "absent"
        with pytest.raises(KeyError):
            cache.get_batch(["absent"])
        with pytest.raises(KeyError):
            cache.get_batch_into(["absent"], {"x": np.zeros((1, 4, 3), np.float32)})


# ---------------------------------------------------------------------------------------------
# Closed handles.


def test_every_method_after_close_is_invalid_argument(arrow_small):
    cache = stowage.open(arrow_small)
    cache.close()
    assert cache.closed is True
    calls = [
        lambda: cache.get(small_key(0)),
        lambda: cache[small_key(0)],
        lambda: cache.get_batch([small_key(0)]),
        lambda: cache.get_batch_into([small_key(0)], {"x": np.zeros((1, 4, 3), np.float32)}),
        lambda: cache.put("new", small_sample(0)),
        lambda: cache.put_batch({"new": small_sample(0)}),
        lambda: cache.flush(),
        lambda: cache.finalize(),
        lambda: cache.validate(),
        lambda: cache.keys(),
        lambda: len(cache),
        lambda: small_key(0) in cache,
    ]
    for i, call in enumerate(calls):
        with pytest.raises(stowage.InvalidArgumentError) as info:
            call()
        assert "closed" in str(info.value), f"call {i}: {info.value}"
    cache.close()  # idempotent
    cache.close()


def test_a_writable_handle_after_close(tmp_path):
    cache = stowage.create(tmp_path / "w", backend="arrow", schema=small_schema())
    cache.put("a", small_sample(0))
    cache.close()
    with pytest.raises(stowage.InvalidArgumentError) as info:
        cache.put("b", small_sample(1))
    assert "closed" in str(info.value)
    cache.close()


def test_with_on_a_closed_handle(arrow_small):
    cache = stowage.open(arrow_small)
    cache.close()
    with pytest.raises(stowage.InvalidArgumentError):
        with cache:
            pass


# ---------------------------------------------------------------------------------------------
# Locks.


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5"])
def test_a_second_writer_is_locked_out_and_readers_are_not(tmp_path, backend):
    location = str(tmp_path / "locked")
    build_small(location, backend, n=4, finalize=False)
    first = stowage.open(location, mode="a")
    try:
        with pytest.raises(stowage.LockedError) as info:
            stowage.open(location, mode="a")
        assert isinstance(info.value, stowage.StowageError)
        with stowage.open(location) as reader:
            assert len(reader) == 4
        # Another process is locked out too.
        run = run_python(f"""
            import stowage
            try:
                stowage.open({location!r}, mode="a")
            except stowage.LockedError:
                print("locked")
        """)
        assert run.stdout.strip() == "locked", run
    finally:
        first.close()
    with stowage.open(location, mode="a") as again:
        assert again.mode == "a"


def test_remote_takes_a_second_writer_at_once(tmp_path):
    location = cache_location(tmp_path, "remote")
    build_small(location, "remote", n=4, finalize=False)
    first = stowage.open(location, mode="a")
    second = stowage.open(location, mode="a")
    try:
        first.put("from-first", small_sample(100))
        second.put("from-second", small_sample(200))
        first.flush()
        second.flush()
    finally:
        first.close()
        second.close()
    with stowage.open(location) as cache:
        assert len(cache) == 6
        assert_same_array(cache.get("from-first")["x"], small_sample(100)["x"])
        assert_same_array(cache.get("from-second")["x"], small_sample(200)["x"])


def test_create_while_a_writer_holds_the_cache(tmp_path):
    location = str(tmp_path / "held")
    cache = stowage.create(location, backend="arrow", schema=small_schema())
    try:
        with pytest.raises((stowage.CacheExistsError, stowage.LockedError)):
            stowage.create(location, backend="arrow", schema=small_schema())
    finally:
        cache.close()


# ---------------------------------------------------------------------------------------------
# StowageError attributes, panics.


def test_stowage_error_attributes_default_to_none():
    error = stowage.StowageError("message")
    assert error.path is None and error.key is None
    assert str(error) == "message"


def test_a_rust_panic_is_internal_error_and_the_interpreter_lives_on(tmp_path):
    with pytest.raises(stowage.InternalError) as info:
        stowage._stowage._panic_for_tests()
    assert isinstance(info.value, stowage.StowageError)
    assert str(info.value)
    # Again: a panic leaves nothing poisoned.
    with pytest.raises(stowage.InternalError):
        stowage._stowage._panic_for_tests()
    gc.collect()
    location = build_small(str(tmp_path / "after"), "arrow", n=3)
    with stowage.open(location) as cache:
        assert_same_array(cache.get(small_key(2))["x"], small_sample(2)["x"])


def test_a_panic_in_a_child_interpreter_exits_normally():
    run = run_python("""
        import stowage, stowage._stowage
        try:
            stowage._stowage._panic_for_tests()
        except stowage.InternalError as e:
            print("caught", type(e).__name__)
        print("alive")
    """)
    assert run.returncode == 0, run
    assert "caught InternalError" in run.stdout and "alive" in run.stdout, run


def test_errors_carry_a_detail(tmp_path):
    with pytest.raises(stowage.StowageError) as info:
        stowage.open(tmp_path / "none")
    assert info.value.detail is None or isinstance(info.value.detail, str)


@pytest.mark.parametrize("backend", ["npy", "memmap"])
def test_a_future_format_version_is_incompatible(tmp_path, backend):
    import json

    location = build_small(cache_location(tmp_path, backend), backend, n=2)
    manifest = tmp_path / "cache" / "stowage.json"
    data = json.loads(manifest.read_text())
    assert "format_version" in data
    data["format_version"] = 999
    manifest.write_text(json.dumps(data))
    with pytest.raises(stowage.IncompatibleError) as info:
        stowage.open(location)
    assert "999" in str(info.value) and "stowage.json" in str(info.value)
    assert isinstance(info.value, stowage.StowageError)


@pytest.mark.parametrize("backend", ["arrow", "hdf5"])
def test_a_failed_write_poisons_the_handle(tmp_path, backend):
    import shutil

    location = cache_location(tmp_path, backend)
    cache = stowage.create(location, backend=backend, schema=small_schema())
    try:
        cache.put("a", small_sample(0))
        cache.flush()
        segments = tmp_path / "cache" / "segments"
        shutil.rmtree(segments)
        segments.write_text("not a directory")  # the next segment cannot be written
        with pytest.raises(stowage.StowageError) as info:
            cache.put("b", small_sample(1))
            cache.flush()
        assert isinstance(info.value, (stowage.StowageIOError, stowage.PoisonedError))
        with pytest.raises(stowage.PoisonedError):
            cache.put("c", small_sample(2))
            cache.flush()
    finally:
        cache.close()


def test_batch_keys_are_a_sequence_of_str_not_a_str(reader):
    with pytest.raises(TypeError, match="not a str"):
        reader.get_batch(small_key(0))
    with pytest.raises(TypeError, match="not a str"):
        reader.get_batch_into(small_key(0), {"x": np.zeros((4, 4, 3), np.float32)})
    with pytest.raises(TypeError, match="keys are str"):
        reader.get_batch([small_key(0), 7])
    # A list, a tuple and a generator read the same rows.
    want = reader.get_batch(KEYS3)["x"]
    np.testing.assert_array_equal(reader.get_batch(tuple(KEYS3))["x"], want)
    out = np.zeros((3, 4, 3), np.float32)
    reader.get_batch_into((k for k in KEYS3), {"x": out})
    np.testing.assert_array_equal(out, want)


def test_indices_that_shrink_and_regrow_their_own_list_read_cleanly(reader):
    # An index's __index__ is Python code: here the first one shrinks the list the Rust side is
    # reading and the second one grows it back, so every item is there when it is read but the
    # list was short while the items ahead were being prefetched.
    table = stowage._stowage.KeyTable([small_key(i) for i in range(3)])
    indices = []

    class Shrinks:
        def __index__(self):
            del indices[2:]
            return 0

    class Regrows:
        def __index__(self):
            indices[2:] = [2] * 19
            return 1

    indices.extend([Shrinks(), Regrows()] + [2] * 19)
    out = {"x": np.zeros((21, 4, 3), np.float32)}
    reader._get_rows_into(table, indices, out)
    for row, i in [(0, 0), (1, 1), (20, 2)]:
        np.testing.assert_array_equal(out["x"][row], reader.get(small_key(i))["x"])
