"""``stowage.torch.CacheDataset``: a map-style dataset over a cache, usable without torch, pickled
to spawned workers, inherited by forked ones; and a real ``DataLoader`` when torch is installed."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

import stowage
from conftest import (
    N_SMALL,
    assert_same_array,
    build_small,
    cache_location,
    run_python,
    small_key,
    small_sample,
)

TIMEOUT = 120


def _sample_of_index(i: int):
    # Keys default to sorted(cache.keys()); small_key(i) sorts in i order.
    return small_sample(i)


def test_importing_stowage_torch_does_not_import_torch():
    run = run_python("""
        import sys
        import stowage.torch
        assert hasattr(stowage.torch, "CacheDataset") and hasattr(stowage.torch, "collate")
        print("torch" in sys.modules)
    """)
    assert run.returncode == 0, run
    assert run.stdout.strip() == "False", run


def test_len_and_getitem_return_writable_copies(small_cache, backend):
    from stowage.torch import CacheDataset

    ds = CacheDataset(small_cache)
    assert len(ds) == N_SMALL
    for i in (0, 7, N_SMALL - 1):
        sample = ds[i]
        assert list(sample) == ["x", "y"]
        assert_same_array(sample["x"], _sample_of_index(i)["x"], what=f"{backend} ds[{i}]")
        assert_same_array(sample["y"], _sample_of_index(i)["y"])
        assert sample["x"].flags.writeable is True, "writable copies by default"
        sample["x"][...] = -1
        assert_same_array(ds[i]["x"], _sample_of_index(i)["x"], what="a copy, not the cache's memory")


def test_copy_false_gives_read_only_views(small_cache, backend):
    from stowage.torch import CacheDataset

    ds = CacheDataset(small_cache, copy=False)
    sample = ds[3]
    assert sample["x"].flags.writeable is False
    assert_same_array(sample["x"], _sample_of_index(3)["x"])


def test_getitems_stacks_a_batch(small_cache, backend):
    from stowage.torch import CacheDataset

    ds = CacheDataset(small_cache)
    indices = [5, 0, 12, 5]
    batch = ds.__getitems__(indices)
    assert set(batch) == {"x", "y"}
    assert batch["x"].shape == (4, 4, 3) and batch["x"].dtype == np.float32
    assert batch["y"].shape == (4, 2) and batch["y"].dtype == np.int64
    assert_same_array(batch["x"], np.stack([_sample_of_index(i)["x"] for i in indices]))
    assert_same_array(batch["y"], np.stack([_sample_of_index(i)["y"] for i in indices]))
    assert batch["x"].flags.writeable is True


def test_transform_is_applied_to_items_and_batches(arrow_small):
    from stowage.torch import CacheDataset

    seen = []

    def transform(sample):
        seen.append(sorted(sample))
        return {"sum": sample["x"].sum(axis=-1), "y": sample["y"]}

    ds = CacheDataset(arrow_small, transform=transform)
    item = ds[2]
    assert set(item) == {"sum", "y"}
    assert np.array_equal(item["sum"], _sample_of_index(2)["x"].sum(axis=-1))
    batch = ds.__getitems__([1, 2])
    assert batch["sum"].shape == (2, 4)
    assert np.array_equal(batch["sum"][1], _sample_of_index(2)["x"].sum(axis=-1))
    assert seen == [["x", "y"], ["x", "y"]]


def test_fields_filter(arrow_small):
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small, fields=["y"])
    assert list(ds[4]) == ["y"]
    assert_same_array(ds[4]["y"], _sample_of_index(4)["y"])
    assert list(ds.__getitems__([0, 1])) == ["y"]


def test_unknown_field_is_refused(arrow_small):
    from stowage.torch import CacheDataset

    with pytest.raises((stowage.InvalidArgumentError, KeyError, ValueError)):
        ds = CacheDataset(arrow_small, fields=["nope"])
        ds[0]


def test_explicit_keys_set_the_order(arrow_small):
    from stowage.torch import CacheDataset

    keys = [small_key(9), small_key(2), small_key(20)]
    ds = CacheDataset(arrow_small, keys=keys)
    assert len(ds) == 3
    for i, key in enumerate(keys):
        assert_same_array(ds[i]["x"], small_sample(int(key[1:]))["x"])


def test_a_missing_key_is_key_error(arrow_small):
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small, keys=[small_key(0), "missing-key"])
    assert_same_array(ds[0]["x"], small_sample(0)["x"])
    with pytest.raises(KeyError) as info:
        ds[1]
    assert "missing-key" in str(info.value)
    with pytest.raises(KeyError):
        ds.__getitems__([0, 1])


def test_an_index_out_of_range(arrow_small):
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small)
    with pytest.raises(IndexError):
        ds[N_SMALL]


def test_getitems_index_out_of_range_names_it(arrow_small):
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small)
    with pytest.raises(IndexError, match=f"index {N_SMALL} is out of range for {N_SMALL} samples"):
        ds.__getitems__([0, N_SMALL])


def test_getitems_takes_negative_numpy_and_range_indices(arrow_small):
    # DataLoader passes a list of ints; other sequences follow the list's own indexing rules.
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small)
    want = ds.__getitems__([N_SMALL - 1, 0, 1])
    for indices in ([-1, 0, 1], np.array([N_SMALL - 1, 0, 1]), [N_SMALL - 1, *range(2)]):
        got = ds.__getitems__(indices)
        assert_same_array(got["x"], want["x"])
        assert_same_array(got["y"], want["y"])
    assert_same_array(ds.__getitems__(range(2, 5))["x"], np.stack([_sample_of_index(i)["x"] for i in range(2, 5)]))


def test_key_table_reads_keys_by_index():
    from stowage import _stowage

    table = _stowage.KeyTable(["a", "", "ünï", "b" * 300])
    assert len(table) == 4
    assert [table[i] for i in range(4)] == ["a", "", "ünï", "b" * 300]
    with pytest.raises(IndexError, match="index 4 is out of range for 4 samples"):
        table[4]
    with pytest.raises(TypeError):
        _stowage.KeyTable(["a", 1])


def test_default_fields_are_the_tensor_fields(tmp_path):
    from stowage.torch import CacheDataset

    location = cache_location(tmp_path, "arrow")
    schema = {"x": ("float32", [2]), "b": "bytes", "j": "json", "r": ("int16", [None, 2])}
    with stowage.create(location, backend="arrow", schema=schema) as cache:
        for i in range(4):
            cache.put(f"k{i}", {"x": np.full(2, i, np.float32), "b": b"blob", "j": "{}",
                                "r": np.zeros((i, 2), np.int16)})
    ds = CacheDataset(location)
    assert list(ds[1]) == ["x", "r"]
    assert ds[3]["r"].shape == (3, 2)
    batch = ds.__getitems__([0, 1, 2])
    assert batch["x"].shape == (3, 2)
    assert isinstance(batch["r"], list), "non-uniform shapes: a list"
    assert [a.shape for a in batch["r"]] == [(0, 2), (1, 2), (2, 2)]


def test_pickles_without_its_handle(arrow_small):
    from stowage.torch import CacheDataset

    ds = CacheDataset(arrow_small, checks=False)
    ds[0]  # opens its handle
    payload = pickle.dumps(ds)
    assert len(payload) < 100_000
    clone = pickle.loads(payload)
    assert len(clone) == N_SMALL
    assert_same_array(clone[5]["x"], small_sample(5)["x"])


# ---------------------------------------------------------------------------------------------
# Workers without torch: the dataset in forked and spawned multiprocessing pools.

_DS = None


def _init_ds(payload):
    global _DS
    _DS = pickle.loads(payload)


def _item(i):
    return i, _DS[i]["x"].tobytes(), _DS[i]["y"].tobytes()


def _items(indices):
    batch = _DS.__getitems__(indices)
    return batch["x"].tobytes(), batch["y"].tobytes()


def _parent_view(ds):
    return [(i, ds[i]["x"].tobytes(), ds[i]["y"].tobytes()) for i in range(len(ds))]


@pytest.mark.parametrize("backend", ["arrow", "memmap"])
def test_spawned_workers_get_the_dataset_pickled(tmp_path, backend):
    from stowage.torch import CacheDataset

    location = build_small(cache_location(tmp_path, backend), backend)
    ds = CacheDataset(location)
    parent = _parent_view(ds)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2, initializer=_init_ds, initargs=(pickle.dumps(ds),)) as pool:
        got = pool.map_async(_item, range(len(ds)), chunksize=4).get(TIMEOUT)
        batches = pool.map_async(_items, [[0, 1, 2], [23, 5]]).get(TIMEOUT)
    assert got == parent
    want = ds.__getitems__([0, 1, 2])
    assert batches[0] == (want["x"].tobytes(), want["y"].tobytes())


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy"])
def test_forked_workers_use_the_inherited_dataset(tmp_path, backend):
    global _DS
    from stowage.torch import CacheDataset

    location = build_small(cache_location(tmp_path, backend), backend)
    ds = CacheDataset(location)
    parent = _parent_view(ds)  # its handle is open before the fork
    _DS = ds
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map_async(_item, range(len(ds)), chunksize=3).get(TIMEOUT)
        assert got == parent
    finally:
        _DS = None


# ---------------------------------------------------------------------------------------------
# A real torch DataLoader (only when torch is installed).


def _need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed")


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_torch_dataloader_with_two_workers(tmp_path, start_method):
    _need_torch()
    import torch
    from torch.utils.data import DataLoader

    from stowage.torch import CacheDataset, collate

    location = build_small(cache_location(tmp_path, "arrow"), "arrow")
    ds = CacheDataset(location)
    loader = DataLoader(
        ds,
        batch_size=5,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context=start_method,
        shuffle=False,
    )
    seen = 0
    for b, batch in enumerate(loader):
        assert isinstance(batch["x"], torch.Tensor)
        n = batch["x"].shape[0]
        want = np.stack([small_sample(b * 5 + j)["x"] for j in range(n)])
        assert np.array_equal(batch["x"].numpy(), want)
        assert batch["y"].dtype == torch.int64
        seen += n
    assert seen == N_SMALL


def test_collate_makes_tensors():
    _need_torch()
    import torch

    from stowage.torch import collate

    batch = collate({"x": np.zeros((2, 3), np.float32), "y": np.arange(2)})
    assert isinstance(batch["x"], torch.Tensor) and batch["x"].shape == (2, 3)


def test_a_nullable_field_with_a_null_in_a_batch(tmp_path):
    # get_batch gives a list when a value is null; the dataset's batch does the same.
    from stowage.torch import CacheDataset

    location = cache_location(tmp_path, "arrow")
    schema = {"x": ("float32", [2]), "m": {"dtype": "int32", "shape": [3], "nullable": True}}
    with stowage.create(location, backend="arrow", schema=schema) as cache:
        cache.put("a", {"x": np.zeros(2, np.float32), "m": np.arange(3, dtype=np.int32)})
        cache.put("b", {"x": np.ones(2, np.float32), "m": None})
    ds = CacheDataset(location)
    assert ds[1]["m"] is None
    batch = ds.__getitems__([0, 1])
    assert batch["x"].shape == (2, 2)
    assert isinstance(batch["m"], list), f"a null in the batch: a list, got {type(batch['m'])}"
    assert batch["m"][1] is None
    assert np.array_equal(batch["m"][0], np.arange(3, dtype=np.int32))
    # A batch without a null stacks.
    only = ds.__getitems__([0, 0])
    assert np.array_equal(np.asarray(only["m"]), np.stack([np.arange(3, dtype=np.int32)] * 2))


def test_bfloat16_fields_keep_their_dtype_metadata(tmp_path):
    from stowage.torch import CacheDataset

    location = cache_location(tmp_path, "arrow")
    with stowage.create(location, backend="arrow", schema={"b": ("bfloat16", [3])}) as cache:
        for i in range(3):
            cache.put(f"k{i}", {"b": np.array([0x3F80, i, 0xC000], np.uint16)})
    ds = CacheDataset(location)
    item = ds[2]["b"]
    assert item.dtype == np.uint16 and item.dtype.metadata == {"stowage_dtype": "bfloat16"}
    assert item.flags.writeable is True
    batch = ds.__getitems__([0, 2])["b"]
    assert batch.dtype == np.uint16 and batch.dtype.metadata == {"stowage_dtype": "bfloat16"}
    assert batch.tolist() == [[0x3F80, 0, 0xC000], [0x3F80, 2, 0xC000]]


def test_a_dataset_over_every_backend_batches_equal_to_items(small_cache, backend):
    from stowage.torch import CacheDataset

    ds = CacheDataset(small_cache, copy=False)
    indices = list(range(0, N_SMALL, 2))
    batch = ds.__getitems__(indices)
    for j, i in enumerate(indices):
        item = ds[i]
        assert item["x"].flags.writeable is False
        assert batch["x"][j].tobytes() == item["x"].tobytes()
        assert batch["y"][j].tobytes() == item["y"].tobytes()


REFERENCE_CACHES = [
    ("torchcachex", "caches/tensor_f32"),
    ("torchcachex", "caches/dict_mixed"),
    ("torchcachex", "caches/list_tensors"),
    ("torchcachex", "caches/dict_dtypes"),
    ("dnanet-memmap", "cache_root/ff9cde909fae61f6"),
    ("aenet-torch-cache", "v2_both_f64.h5"),
    ("mixed/aenet-append", "cache/dataset.h5"),
]


@pytest.mark.parametrize("set_name,relative", REFERENCE_CACHES,
                         ids=[f"{s}/{r}" for s, r in REFERENCE_CACHES])
def test_a_dataset_over_each_reference_cache(set_name, relative):
    from conftest import reference_set
    from stowage.torch import CacheDataset

    path = reference_set(set_name) / relative
    ds = CacheDataset(path)
    with stowage.open(path) as cache:
        keys = sorted(cache.keys())
        assert ds.keys == tuple(keys) and len(ds) == len(keys)
        tensor_fields = [f for f, spec in cache.schema.items() if spec["kind"] == "tensor"]
        batch = ds.__getitems__(list(range(len(ds))))
        assert set(batch) == set(tensor_fields)
        for i, key in enumerate(keys):
            want = cache.get(key)
            item = ds[i]
            assert list(item) == tensor_fields
            for field in tensor_fields:
                w = want[field]
                row = batch[field][i]
                if w is None:
                    assert item[field] is None and row is None, (key, field)
                    continue
                assert item[field].dtype == w.dtype and item[field].tobytes() == w.tobytes()
                assert np.asarray(row).dtype == w.dtype and np.asarray(row).shape == w.shape
                assert np.asarray(row).tobytes() == w.tobytes(), (key, field)
