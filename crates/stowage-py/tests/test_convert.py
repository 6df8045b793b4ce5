"""``stowage.convert``: an arrow cache into memmap (and the other layouts), values equal, and a
rerun resumes instead of failing or writing twice."""

from __future__ import annotations

import numpy as np
import pytest

import stowage
from conftest import N_SMALL, assert_same_array, build_small, cache_location, small_key, small_sample


def _assert_small_cache(location, n=N_SMALL):
    with stowage.open(location) as cache:
        assert sorted(cache.keys()) == [small_key(i) for i in range(n)]
        for i in range(n):
            got = cache.get(small_key(i))
            assert_same_array(got["x"], small_sample(i)["x"], what=f"{location} {i}")
            assert_same_array(got["y"], small_sample(i)["y"])
        return cache.backend


def test_arrow_to_memmap_and_a_rerun_resumes(tmp_path):
    src = build_small(cache_location(tmp_path, "arrow", "src"), "arrow")
    dst = str(tmp_path / "dst")
    summary = stowage.convert(src, dst, "memmap")
    assert isinstance(summary, str) and summary
    assert _assert_small_cache(dst) == "memmap"
    again = stowage.convert(src, dst, "memmap", verify=True)
    assert isinstance(again, str)
    assert _assert_small_cache(dst) == "memmap"
    with stowage.open(dst) as cache:
        assert len(cache) == N_SMALL, "nothing written twice"
        assert cache.validate().clean is True


def test_a_rerun_finishes_an_unfinished_conversion(tmp_path):
    # An unfinished arrow source of 10 keys converted, then 14 more keys, converted again.
    src = cache_location(tmp_path, "arrow", "src")
    build_small(src, "arrow", n=10, finalize=False)
    dst = str(tmp_path / "dst")
    stowage.convert(src, dst, "arrow", flush_every=3)
    _assert_small_cache(dst, 10)
    with stowage.open(src, mode="a") as cache:
        for i in range(10, N_SMALL):
            cache.put(small_key(i), small_sample(i))
    stowage.convert(src, dst, "arrow")
    _assert_small_cache(dst, N_SMALL)


@pytest.mark.parametrize("to", ["npy", "hdf5", "arrow"])
def test_convert_to_every_layout(tmp_path, to):
    src = build_small(cache_location(tmp_path, "memmap", "src"), "memmap")
    dst = str(tmp_path / f"dst-{to}")
    stowage.convert(src, dst, to, verify=True)
    assert _assert_small_cache(dst) == to


def test_convert_to_a_file_url(tmp_path):
    src = build_small(cache_location(tmp_path, "arrow", "src"), "arrow")
    dst = (tmp_path / "remote").as_uri()
    stowage.convert(src, dst, "remote")
    assert _assert_small_cache(dst) == "remote"
    back = str(tmp_path / "back")
    stowage.convert(dst, back, "arrow")
    _assert_small_cache(back)


def test_convert_refuses_bad_arguments(tmp_path):
    src = build_small(cache_location(tmp_path, "arrow", "src"), "arrow")
    with pytest.raises(stowage.StowageError) as info:
        stowage.convert(src, str(tmp_path / "d"), "parquet")
    assert "parquet" in str(info.value)
    with pytest.raises(stowage.StowageError) as info:
        stowage.convert(str(tmp_path / "missing"), str(tmp_path / "d2"), "arrow")
    assert "missing" in str(info.value)


def test_convert_a_different_source_into_a_target_needs_merge(tmp_path):
    first = build_small(cache_location(tmp_path, "arrow", "first"), "arrow", n=5)
    second = cache_location(tmp_path, "arrow", "second")
    with stowage.create(second, backend="arrow",
                        schema={"x": ("float32", [4, 3]), "y": ("int64", [2])}) as cache:
        for i in range(5, 9):
            cache.put(small_key(i), small_sample(i))
    dst = str(tmp_path / "dst")
    stowage.convert(first, dst, "arrow")
    with pytest.raises(stowage.StowageError) as info:
        stowage.convert(second, dst, "arrow")
    assert "merge" in str(info.value)
    stowage.convert(second, dst, "arrow", merge=True)
    _assert_small_cache(dst, 9)


def _reference(name):
    from conftest import reference_set

    return reference_set(name)


@pytest.mark.parametrize(
    "set_name,relative,to",
    [
        ("dnanet-memmap", "cache_root/aed9b48500e9acfd", "arrow"),
        ("torchcachex", "caches/dict_dtypes", "hdf5"),
        ("torchcachex", "caches/tensor_orphan", "arrow"),
        ("aenet-torch-cache", "v2_both_f64.h5", "arrow"),
        ("dnanet-memmap", "cache_root/ff9cde909fae61f6", "memmap"),
    ],
)
def test_convert_an_original_tools_cache(tmp_path, set_name, relative, to):
    src = _reference(set_name) / relative
    dst = tmp_path / "dst"
    summary = stowage.convert(src, dst, to, verify=True)
    assert "identical" in summary or summary
    with stowage.open(src) as a, stowage.open(dst) as b:
        assert b.backend == to
        assert sorted(a.keys()) == sorted(b.keys())
        for key in a.keys():
            want, got = a.get(key), b.get(key)
            assert list(got) == list(want), key
            for field, value in want.items():
                if isinstance(value, np.ndarray):
                    assert got[field].dtype == value.dtype and got[field].shape == value.shape
                    assert got[field].tobytes() == value.tobytes(), (key, field)
                else:
                    assert got[field] == value, (key, field)


def test_a_conversion_the_target_cannot_hold_writes_nothing(tmp_path):
    src = _reference("torchcachex") / "caches" / "dict_mixed"
    dst = tmp_path / "npy"
    with pytest.raises(stowage.StowageError) as info:
        stowage.convert(src, dst, "npy")
    assert "meta" in str(info.value), "names the field"
    assert not dst.exists() or not any(dst.iterdir()), "nothing was written"
