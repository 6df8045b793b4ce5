"""Arrays ``get`` returns outlive their handle: after ``close()``, after the handle is
garbage-collected, and (zero-copy backends) while they share the memory map."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import stowage
from conftest import (
    DOCUMENTED,
    N_SMALL,
    assert_same_array,
    capability,
    run_python,
    small_key,
    small_sample,
)


def test_arrays_stay_valid_after_close(small_cache, backend):
    cache = stowage.open(small_cache)
    got = {i: cache.get(small_key(i)) for i in range(0, N_SMALL, 5)}
    batch = cache.get_batch([small_key(1), small_key(2)])
    cache.close()
    gc.collect()
    for i, sample in got.items():
        assert_same_array(sample["x"], small_sample(i)["x"], what=f"{backend} after close")
        assert_same_array(sample["y"], small_sample(i)["y"])
        assert float(sample["x"].sum()) == float(small_sample(i)["x"].sum())
    assert_same_array(batch["x"], np.stack([small_sample(1)["x"], small_sample(2)["x"]]))


def test_arrays_stay_valid_after_the_handle_is_collected(small_cache, backend):
    cache = stowage.open(small_cache)
    x = cache.get(small_key(3))["x"]
    y = cache[small_key(4)]["y"]
    del cache
    gc.collect()
    # Touch every byte.
    assert_same_array(x, small_sample(3)["x"], what=f"{backend} after gc")
    assert_same_array(y, small_sample(4)["y"])
    assert np.array_equal(x.copy(), small_sample(3)["x"])


def test_zero_copy_arrays_are_read_only_views(small_cache, backend):
    with stowage.open(small_cache) as cache:
        zero_copy = capability(cache, "zero_copy")
        assert zero_copy is DOCUMENTED[backend]["zero_copy"]
        x = cache.get(small_key(6))["x"]
        assert x.flags.writeable is False
        with pytest.raises(ValueError):
            x[0, 0] = 1.0
        assert x.flags.c_contiguous
        if zero_copy:
            assert x.base is not None, "a zero-copy array is a view of the memory map"
            # A view of the map cannot be made writable (that would write into the cache).
            with pytest.raises(ValueError):
                x.flags.writeable = True
    assert_same_array(x, small_sample(6)["x"])


def test_every_get_result_is_read_only(small_cache, backend):
    with stowage.open(small_cache) as cache:
        for i in range(N_SMALL):
            sample = cache.get(small_key(i))
            for field, value in sample.items():
                assert value.flags.writeable is False, (backend, i, field)


def test_arrays_survive_the_files_being_deleted(tmp_path):
    # After close and deletion of every file, a zero-copy view still reads its bytes (the mapping
    # of an unlinked file stays) or the backend copied them: never a crash. In a child
    # interpreter, so that a crash fails only this test.
    run = run_python(f"""
        import gc, shutil, numpy as np, stowage
        location = {str(tmp_path / "c")!r}
        with stowage.create(location, backend="memmap", schema={{"x": ("float32", [256])}}) as c:
            for i in range(8):
                c.put(f"k{{i}}", {{"x": np.full(256, i, np.float32)}})
            c.finalize()
        cache = stowage.open(location)
        arrays = [cache.get(f"k{{i}}")["x"] for i in range(8)]
        cache.close(); del cache; gc.collect()
        shutil.rmtree(location)
        print(all(float(a.sum()) == 256.0 * i for i, a in enumerate(arrays)))
    """)
    assert run.returncode == 0, run
    assert run.stdout.strip() == "True", run


def test_many_handles_opened_and_dropped(small_cache, backend):
    kept = []
    for round in range(20):
        cache = stowage.open(small_cache)
        kept.append(cache.get(small_key(round % N_SMALL))["x"])
        if round % 2:
            cache.close()
        del cache
    gc.collect()
    for round, x in enumerate(kept):
        assert_same_array(x, small_sample(round % N_SMALL)["x"])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_arrays_are_freed_when_dropped(tmp_path, backend):
    # 16 KiB per sample: 1500 leaked arrays would be 24 MiB.
    from conftest import build_constant_rows, cache_location

    location = build_constant_rows(cache_location(tmp_path, backend), backend, 4096, finalize=True)
    with stowage.open(location) as cache:
        for round in range(300):  # warm up allocators and caches
            cache.get(f"k{round % 16}")
        gc.collect()
        before = _rss_bytes()
        for round in range(1500):
            x = cache.get(f"k{round % 16}")["x"]
            if round % 100 == 0:
                assert float(x[0]) == round % 16
            del x
        batch_out = {"x": np.empty((16, 4096), np.float32)}
        for _ in range(30):
            cache.get_batch_into([f"k{i}" for i in range(16)], batch_out)
            cache.get_batch([f"k{i}" for i in range(16)])
        gc.collect()
        grown = _rss_bytes() - before
    assert grown < 12 * 2**20, f"{backend}: RSS grew {grown / 2**20:.1f} MiB over 1500 gets"


def test_arrays_from_a_writer_outlive_later_puts_flushes_and_close(tmp_path, backend):
    from conftest import cache_location

    location = cache_location(tmp_path, backend)
    cache = stowage.create(location, backend=backend, schema={"x": ("float64", [512])})
    held = []
    for i in range(120):
        cache.put(f"k{i}", {"x": np.full(512, i, np.float64)})
        if i % 20 == 0:
            held.append((i, cache.get(f"k{i}")["x"]))  # before its flush
        if i % 50 == 49:
            cache.flush()
        if i % 30 == 0 and i > 0:
            held.append((i - 1, cache.get(f"k{i - 1}")["x"]))
    cache.finalize()
    cache.close()
    del cache
    gc.collect()
    scratch = [np.full(4096, 7.0) for _ in range(100)]  # reuse freed memory
    bad = [(i, float(a[0]), float(a[-1])) for i, a in held if not (a == i).all()]
    assert bad == [], f"{backend}: arrays changed after the writer went on: {bad}"
    del scratch


def test_get_arrays_are_aligned_for_their_dtype(small_cache, backend):
    # numpy copes with misaligned data, slowly; torch.from_numpy and C extensions that cast the
    # pointer to the element type expect aligned data.
    with stowage.open(small_cache) as cache:
        misaligned = [
            (key, field, value.__array_interface__["data"][0] % value.dtype.alignment)
            for key in cache.keys()
            for field, value in cache.get(key).items()
            if not value.flags.aligned
        ]
        assert misaligned == [], f"{backend}: {len(misaligned)} misaligned arrays, e.g. {misaligned[:3]}"
