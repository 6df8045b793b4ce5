"""Every original tool's reference cache read from Python (``$STOWAGE_REFERENCE_DIR``): keys,
lengths and every value compared with the expected ``.npy`` (dtype, shape and bytes), pickled
blob or JSON text the set stores beside it. The sets are read in place and never copied into the
repository; a test that needs to change one works on a copy under ``tmp_path``."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import stowage
from conftest import reference_set


def _manifest(set_dir: pathlib.Path) -> dict:
    return json.loads((set_dir / "manifest.json").read_text())


def _npy(path: pathlib.Path) -> np.ndarray:
    return np.load(path, allow_pickle=False)


def _assert_tensor(got, expected_file: pathlib.Path, what: str):
    want = _npy(expected_file)
    assert isinstance(got, np.ndarray), f"{what}: got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.ascontiguousarray(got).tobytes() == want.tobytes(), f"{what}: bytes differ"
    assert got.flags.writeable is False, f"{what}: get returns read-only arrays"


# ---------------------------------------------------------------------------------------------
# torchcachex


def _torchcachex_field(structure: str, leaf: dict, i: int) -> str:
    if leaf.get("name") is not None:
        return leaf["name"]
    return "tensor" if structure == "tensor" else f"item{i}"


def test_every_torchcachex_reference_cache():
    set_dir = reference_set("torchcachex")
    caches = _manifest(set_dir)["caches"]
    assert len(caches) == 8
    compared = 0
    for name, entry in caches.items():
        path = set_dir / entry["path"]
        with stowage.open(path) as cache:
            assert cache.backend == "arrow", name
            assert "torchcachex" in cache.format, (name, cache.format)
            assert cache.mode == "r"
            assert sorted(cache.keys()) == sorted(entry["keys"]), name
            assert len(cache) == len(entry["keys"])
            for key, key_entry in entry["keys"].items():
                assert key in cache
                sample = cache.get(key)
                structure = key_entry["structure"]
                for i, leaf in enumerate(key_entry["leaves"]):
                    field = _torchcachex_field(structure, leaf, i)
                    assert field in sample, (name, key, field, list(sample))
                    expected = set_dir / leaf["expected_file"]
                    what = f"torchcachex {name} {key} {field}"
                    if leaf["kind"] == "tensor":
                        _assert_tensor(sample[field], expected, what)
                    else:
                        got = sample[field]
                        assert isinstance(got, bytes), f"{what}: {type(got).__name__}"
                        assert got == expected.read_bytes(), what
                    compared += 1
    assert compared > 60, compared


def test_torchcachex_orphaned_segment_is_read():
    set_dir = reference_set("torchcachex")
    with stowage.open(set_dir / "caches" / "tensor_orphan") as cache:
        assert len(cache) == 13
        for key in ("t009", "t010", "t011", "t_shape_4x4"):
            assert key in cache
        _assert_tensor(cache.get("t000")["tensor"], set_dir / "expected/tensor_orphan/t000.npy",
                       "orphan t000: the higher segment wins")


ORIGINAL_CACHES = (
    [("torchcachex", f"caches/{name}") for name in (
        "tensor_f32", "tensor_noindex", "tensor_orphan", "dict_mixed", "tuple_mixed",
        "list_tensors", "tensor_f16", "dict_dtypes")]
    + [("dnanet-memmap", f"cache_root/{key}") for key in (
        "aed9b48500e9acfd", "ff9cde909fae61f6", "d3c3787192a40966")]
    + [("aenet-torch-cache", f"{name}.h5") for name in (
        "v2_both_f64", "v2_deriv_f64", "v2_feat_f32", "v2_single_f32", "v1_legacy")]
)


@pytest.mark.parametrize("set_name,relative", ORIGINAL_CACHES,
                         ids=[f"{s}/{r}" for s, r in ORIGINAL_CACHES])
def test_an_original_tools_cache_validates_unchecked_never_clean(set_name, relative):
    # The original tools write no stowage checksums: every sample is read (undamaged) but none
    # is checked, so validate lists the data as unchecked and never says clean (as `stowage
    # verify` does: exit 3, "N samples unchecked").
    set_dir = reference_set(set_name)
    with stowage.open(set_dir / relative) as cache:
        report = cache.validate()
        assert report.undamaged is True, report.problems
        assert list(report.problems) == []
        assert report.samples_checked >= len(cache)
        assert report.clean is False, f"{relative}: no stowage checksums, yet clean: {report!r}"
        assert len(report.unchecked) >= 1, f"{relative}: no unchecked line: {report!r}"


def test_torchcachex_get_batch_into_reads_a_reference_cache():
    set_dir = reference_set("torchcachex")
    entry = _manifest(set_dir)["caches"]["dict_dtypes"]
    keys = sorted(entry["keys"])
    with stowage.open(set_dir / entry["path"]) as cache:
        for leaf in entry["keys"][keys[0]]["leaves"]:
            field = leaf["name"]
            want = [_npy(set_dir / next(l for l in entry["keys"][k]["leaves"]
                                        if l["name"] == field)["expected_file"]) for k in keys]
            if len({w.shape for w in want}) != 1:
                continue
            out = {field: np.zeros((len(keys), *want[0].shape), dtype=want[0].dtype)}
            cache.get_batch_into(keys, out)
            assert out[field].tobytes() == np.stack(want).tobytes(), field


# ---------------------------------------------------------------------------------------------
# DNANet memmap


def test_every_dnanet_reference_cache():
    set_dir = reference_set("dnanet-memmap")
    manifest = _manifest(set_dir)
    assert len(manifest["caches"]) == 3
    for entry in manifest["caches"]:
        path = set_dir / "cache_root" / entry["key"]
        rows = entry["rows"]
        with stowage.open(path) as cache:
            assert cache.backend == "memmap"
            assert cache.keys() == [r["path"] for r in rows], "the row paths in row order"
            assert len(cache) == len(rows)
            for i, row in enumerate(rows):
                sample = cache.get(row["path"])
                what = f"dnanet {entry['key']} row {i}"
                for field in ("data", "scaler"):
                    _assert_tensor(sample[field], set_dir / row["expected"][field], f"{what} {field}")
                if row["has_annotation"]:
                    _assert_tensor(sample["annotation"], set_dir / row["expected"]["annotation"],
                                   f"{what} annotation")
                else:
                    assert sample["annotation"] is None, f"{what}: no annotation is null"
                for field, column in (("panel", "adjusted_panel_json"),
                                      ("allele", "allele_annotation_json"),
                                      ("meta_json", "meta_json")):
                    assert sample[field] == row[column], f"{what} {field}"
            report = cache.validate()
            assert report.undamaged is True, report.problems


def test_dnanet_reference_get_batch_stacks_rows():
    set_dir = reference_set("dnanet-memmap")
    entry = _manifest(set_dir)["caches"][0]
    rows = entry["rows"]
    with stowage.open(set_dir / "cache_root" / entry["key"]) as cache:
        batch = cache.get_batch([r["path"] for r in rows])
        want = np.stack([_npy(set_dir / r["expected"]["data"]) for r in rows])
        assert batch["data"].dtype == want.dtype and batch["data"].tobytes() == want.tobytes()
        out = {"scaler": np.zeros((len(rows), 32), np.float32)}
        cache.get_batch_into([r["path"] for r in rows], out)
        want = np.stack([_npy(set_dir / r["expected"]["scaler"]) for r in rows])
        assert out["scaler"].tobytes() == want.tobytes()


def test_a_truncated_dnanet_copy_is_a_stowage_error(tmp_path):
    set_dir = reference_set("dnanet-memmap")
    copy = tmp_path / "ff9cde909fae61f6"
    shutil.copytree(set_dir / "cache_root" / "ff9cde909fae61f6", copy)
    data = copy / "data.bin"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(stowage.StowageError) as info:
        with stowage.open(copy) as cache:
            for key in cache.keys():
                cache.get(key)
    assert "data.bin" in str(info.value), str(info.value)


# ---------------------------------------------------------------------------------------------
# aenet HDF5


def test_every_aenet_reference_file():
    set_dir = reference_set("aenet-torch-cache")
    compared = 0
    for name in ["v2_both_f64", "v2_deriv_f64", "v2_feat_f32", "v2_single_f32", "v1_legacy"]:
        expected = json.loads((set_dir / "expected" / f"{name}.json").read_text())
        entries = sorted({e["entry_idx"] for section in ("features", "derivatives")
                          for e in (expected.get(section) or [])})
        with stowage.open(set_dir / f"{name}.h5") as cache:
            assert cache.keys() == [str(e) for e in entries], name
            assert cache.checks is True, "hdf5 always checks"
            for entry in entries:
                sample = cache.get(str(entry))
                features = set_dir / "expected" / name / f"features_entry{entry}.npy"
                if features.exists():
                    _assert_tensor(sample["features"], features, f"{name} {entry} features")
                    compared += 1
                for file in sorted((set_dir / "expected" / name).glob(f"deriv_entry{entry}_*.npy")):
                    field = file.stem[len(f"deriv_entry{entry}_"):]
                    _assert_tensor(sample[field], file, f"{name} {entry} {field}")
                    compared += 1
    assert compared >= 3 + 22, compared


def test_an_aenet_file_without_a_cache_is_refused():
    set_dir = reference_set("aenet-torch-cache")
    plain = set_dir / "plain.h5"
    with pytest.raises(stowage.StowageError) as info:
        stowage.open(plain)
    assert "plain.h5" in str(info.value)


# ---------------------------------------------------------------------------------------------
# hangar


def test_a_bare_hangar_data_directory_holds_no_keys():
    set_dir = reference_set("hangar-numpy10")
    repo = set_dir / "repo"
    with pytest.raises(stowage.UnsupportedError) as info:
        stowage.open(repo)
    message = str(info.value)
    assert "hangar" in message.lower(), message
    assert "no keys" in message or "records" in message, message


def test_a_bare_hangar_data_directory_takes_no_writer(tmp_path):
    set_dir = reference_set("hangar-numpy10")
    repo = tmp_path / "repo"  # a copy: a writer must never touch the shared set
    shutil.copytree(set_dir / "repo", repo)
    with pytest.raises(stowage.UnsupportedError) as info:
        stowage.open(repo, mode="a")
    assert "hangar" in str(info.value).lower()


def test_the_hangar_refusal_names_the_directory():
    set_dir = reference_set("hangar-numpy10")
    repo = set_dir / "repo"
    with pytest.raises(stowage.UnsupportedError) as info:
        stowage.open(repo)
    error = info.value
    assert str(repo) in str(error) or (error.path or "").rstrip("/") == str(repo), (
        f"neither the message nor .path names {repo}: {str(error)!r}, path={error.path!r}"
    )


# ---------------------------------------------------------------------------------------------
# mixed/: caches stowage wrote and an original tool changed


def _check_mixed_keys(set_dir: pathlib.Path, cache_path: pathlib.Path, keys: dict, ordered: bool):
    with stowage.open(cache_path) as cache:
        listed = cache.keys()
        if ordered:
            assert listed == list(keys), cache_path
        else:
            assert sorted(listed) == sorted(keys), cache_path
        assert len(cache) == len(keys)
        for key, entry in keys.items():
            sample = cache.get(key)
            for field, want in entry["fields"].items():
                what = f"{set_dir.name} {key} {field}"
                if "expected_file" in want:
                    if field == "annotation" and entry.get("has_annotation") is False:
                        assert sample[field] is None, what
                        continue
                    _assert_tensor(sample[field], set_dir / want["expected_file"], what)
                elif "json" in want:
                    assert sample[field] == want["json"], what
        return cache.validate()


@pytest.mark.parametrize(
    "name",
    ["torchcachex-append-tensor", "torchcachex-append-dict", "torchcachex-readonly-open"],
)
def test_mixed_torchcachex_sets(name):
    set_dir = reference_set(f"mixed/{name}")
    manifest = _manifest(set_dir)
    report = _check_mixed_keys(set_dir, set_dir / manifest["cache_path"], manifest["keys"], False)
    assert report.undamaged is True, report.problems
    if name == "torchcachex-readonly-open":
        assert report.clean is True, "stowage wrote every row"
    else:
        assert report.clean is False, "torchcachex's segment is unchecked"


def test_mixed_dnanet_resume():
    set_dir = reference_set("mixed/dnanet-resume")
    manifest = _manifest(set_dir)
    keys = dict(sorted(manifest["keys"].items(), key=lambda kv: kv[1]["row"]))
    report = _check_mixed_keys(set_dir, set_dir / manifest["cache_path"], keys, True)
    assert report.undamaged is True, report.problems
    assert report.clean is False, "DNANet's two rows carry no stowage checksum"


def test_mixed_hangar_into_stowage():
    set_dir = reference_set("mixed/hangar-into-stowage")
    for name, entry in _manifest(set_dir)["caches"].items():
        report = _check_mixed_keys(set_dir, set_dir / entry["cache_path"], entry["keys"], False)
        assert report.undamaged is True, (name, report.problems)
        assert report.clean is False, "hangar's file is unchecked"


def test_mixed_aenet_append():
    set_dir = reference_set("mixed/aenet-append")
    manifest = _manifest(set_dir)
    path = set_dir / manifest["cache_path"]
    with stowage.open(path) as cache:
        assert cache.keys() == ["0", "1", "2"]
        sample = cache.get("1")
        assert sample["radial_dG_drij"] is None, "entry 1 has no derivatives"
    report = _check_mixed_keys(set_dir, path, manifest["keys"], True)
    assert report.undamaged is True, report.problems
    assert report.clean is False, "aenet's rows are unchecked"


def test_reference_sets_are_untouched_by_reads():
    # Reading never writes: the torchcachex-readonly-open set's index.pkl and files stay.
    set_dir = reference_set("mixed/torchcachex-readonly-open")
    cache_dir = set_dir / _manifest(set_dir)["cache_path"]
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_dir.rglob("*") if p.is_file()}
    with stowage.open(cache_dir) as cache:
        for key in cache.keys():
            cache.get(key)
        cache.validate()
    after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_dir.rglob("*") if p.is_file()}
    assert before == after


# ---------------------------------------------------------------------------------------------
# Append mode on copies of the original tools' caches.


def test_an_unfinished_dnanet_copy_resumes_in_append_mode(tmp_path):
    set_dir = reference_set("dnanet-memmap")
    entry = next(c for c in _manifest(set_dir)["caches"] if c["key"] == "d3c3787192a40966")
    copy = tmp_path / entry["key"]
    shutil.copytree(set_dir / "cache_root" / entry["key"], copy)
    rows = entry["rows"]
    with stowage.open(copy, mode="a") as cache:
        assert cache.mode == "a" and cache.finalized is False
        assert cache.keys() == [r["path"] for r in rows]
        template = cache.get(rows[0]["path"])
        new = {name: (np.array(v) if isinstance(v, np.ndarray) else v) for name, v in template.items()}
        new["data"] = np.full_like(new["data"], 1234)
        cache.put("/srv/hid/new.hid", new)
        cache.finalize()
    with stowage.open(copy) as cache:
        assert cache.finalized is True
        assert cache.keys() == [r["path"] for r in rows] + ["/srv/hid/new.hid"]
        for row in rows:
            _assert_tensor(cache.get(row["path"])["data"], set_dir / row["expected"]["data"], row["path"])
        assert (cache.get("/srv/hid/new.hid")["data"] == 1234).all()
        assert cache.validate().undamaged is True


@pytest.mark.parametrize("which", ["torchcachex", "aenet"])
def test_append_mode_on_an_original_tools_cache_appends_or_says_why(tmp_path, which):
    # mode="a" on a cache the registry recognizes: it appends (stowage attaches to the tool's
    # cache, README "Sharing caches") or refuses with UnsupportedError; "not found" is wrong for
    # a cache that is there.
    if which == "torchcachex":
        set_dir = reference_set("torchcachex")
        copy = tmp_path / "tensor_f32"
        shutil.copytree(set_dir / "caches" / "tensor_f32", copy)
        sample = {"tensor": np.arange(16, dtype=np.float32)}
    else:
        set_dir = reference_set("aenet-torch-cache")
        copy = tmp_path / "v2_both_f64.h5"
        shutil.copy(set_dir / "v2_both_f64.h5", copy)
        sample = None
    with stowage.open(copy) as reader:
        before = {k: reader.get(k) for k in reader.keys()}
    try:
        cache = stowage.open(copy, mode="a")
    except stowage.UnsupportedError:
        return
    except stowage.CacheNotFoundError as error:
        pytest.fail(f"mode='a' on the {which} cache at {copy} says it is not there: {error}")
    with cache:
        assert cache.mode == "a"
        if sample is not None:
            cache.put("stowage-new", sample)
    with stowage.open(copy) as reader:
        assert set(before) <= set(reader.keys())
        for key, old in before.items():
            for field, value in old.items():
                if isinstance(value, np.ndarray):
                    assert reader.get(key)[field].tobytes() == value.tobytes()
        if sample is not None:
            assert reader.get("stowage-new")["tensor"].tobytes() == sample["tensor"].tobytes()
