"""Damaged caches: a flipped byte inside a stored sample is CorruptedError (never data), validate
reports it, and a truncated file is a StowageError (never a crash; checked in a child
interpreter so that a crash fails the test instead of the suite)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import stowage
from conftest import (
    assert_same_array,
    cache_location,
    find_bytes,
    flip_byte,
    local_dir,
    marker_tensor,
    run_python,
)

N = 10
VICTIM = 5


def _key(i: int) -> str:
    return f"key-{i:02d}"


def _needle(i: int) -> bytes:
    # Words 2..9 of the marker: distinct for every sample (its seed is in each value).
    return marker_tensor(i)[2:10].tobytes()


def _build(tmp_path, backend) -> str:
    location = cache_location(tmp_path, backend)
    schema = {"m": ("float64", [64]), "i": ("int32", [1])}
    cache = stowage.create(location, backend=backend, schema=schema)
    for i in range(N):
        cache.put(_key(i), {"m": marker_tensor(i), "i": np.array([i], np.int32)})
    cache.flush()
    cache.finalize()
    cache.close()
    return location


def _stored_copies(location: str, i: int):
    found = find_bytes(local_dir(location), _needle(i))
    assert found, (
        f"the bytes of sample {_key(i)} are not stored plainly anywhere under {location}: "
        "cannot aim a flipped byte (compressed by default?)"
    )
    return found


def test_a_flipped_byte_in_a_sample_is_corrupted_error(tmp_path, backend):
    location = _build(tmp_path, backend)
    copies = _stored_copies(location, VICTIM)
    for path, offset in copies:
        flip_byte(path, offset + 11)
    damaged_files = {str(path) for path, _ in copies}

    with stowage.open(location) as cache:
        assert cache.checks is True
        with pytest.raises(stowage.CorruptedError) as info:
            cache.get(_key(VICTIM))
        error = info.value
        assert error.path is not None, "CorruptedError.path names the file"
        root = local_dir(location)
        relative = {str(pathlib.Path(f).relative_to(root)) for f in damaged_files}
        assert any(error.path == f or error.path.endswith("/" + r)
                   for f, r in zip(sorted(damaged_files), sorted(relative))), (error.path, damaged_files)
        assert error.key == _key(VICTIM), "every backend reports the sample's key"
        assert isinstance(error.detail, str) and error.detail
        assert _key(VICTIM) in str(error) and error.path in str(error), str(error)

        with pytest.raises(stowage.CorruptedError):
            cache[_key(VICTIM)]
        with pytest.raises(stowage.CorruptedError):
            cache.get_batch([_key(0), _key(VICTIM)])
        out = {"m": np.zeros((2, 64), np.float64)}
        with pytest.raises(stowage.CorruptedError):
            cache.get_batch_into([_key(VICTIM), _key(0)], out)

        if backend != "hdf5":  # hdf5 checks a whole segment: its neighbours go with it
            for i in (VICTIM - 1, VICTIM + 1):
                got = cache.get(_key(i))
                assert_same_array(got["m"], marker_tensor(i), what=f"neighbour {_key(i)}")

        report = cache.validate()
        assert report.clean is False
        assert report.undamaged is False
        assert len(report.problems) >= 1
        paths = [p for p, _, _ in report.problems]
        assert any(p is not None for p in paths), report.problems
        keys = [k for _, k, _ in report.problems if k is not None]
        if keys and backend != "hdf5":
            assert _key(VICTIM) in keys, report.problems


def test_a_flipped_byte_found_by_a_writable_handle_too(tmp_path):
    location = str(tmp_path / "arrow")
    cache = stowage.create(location, backend="arrow", schema={"m": ("float64", [64])})
    for i in range(N):
        cache.put(_key(i), {"m": marker_tensor(i)})
    cache.flush()
    cache.close()
    for path, offset in _stored_copies(location, 3):
        flip_byte(path, offset)
    with stowage.open(location, mode="a") as cache:
        with pytest.raises(stowage.CorruptedError):
            cache.get(_key(3))


@pytest.mark.parametrize("backend", ["memmap", "arrow", "npy"])
def test_checks_off_reads_without_the_checksum(tmp_path, backend):
    location = _build(tmp_path, backend)
    for path, offset in _stored_copies(location, VICTIM):
        flip_byte(path, offset + 11)
    with stowage.open(location, checks=False) as cache:
        assert cache.checks is False
        got = cache.get(_key(VICTIM))["m"]
        want = marker_tensor(VICTIM)
        assert got.tobytes() != want.tobytes(), "the flipped byte is read as it is"
        diff = np.frombuffer(got.tobytes(), np.uint8) != np.frombuffer(want.tobytes(), np.uint8)
        assert diff.sum() == 1
        report = cache.validate()
        assert report.clean is False and report.undamaged is False, (
            "validate checks the checksums whatever checks= says"
        )


def _probe_truncated(location: str, keys) -> dict:
    code = f"""
        import json
        import stowage
        result = {{"open": None, "gets": [], "validate": None}}
        try:
            cache = stowage.open({location!r})
        except stowage.StowageError as e:
            result["open"] = [type(e).__name__, str(e), e.path]
        else:
            for key in {list(keys)!r}:
                try:
                    cache.get(key)
                    result["gets"].append("ok")
                except stowage.StowageError as e:
                    result["gets"].append(type(e).__name__)
                except KeyError:
                    result["gets"].append("KeyError")
            try:
                report = cache.validate()
                result["validate"] = [report.clean, report.undamaged, len(report.problems)]
            except stowage.StowageError as e:
                result["validate"] = type(e).__name__
        print("RESULT " + json.dumps(result))
    """
    run = run_python(code)
    assert run.returncode == 0, (
        f"reading a truncated cache crashed or raised a non-stowage error "
        f"(exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    )
    line = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_a_truncated_data_file_is_a_stowage_error_never_a_crash(tmp_path, backend):
    location = _build(tmp_path, backend)
    path, offset = _stored_copies(location, VICTIM)[0]
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(offset + 16)  # inside the victim's bytes; later samples lost
    result = _probe_truncated(location, [_key(i) for i in range(N)])
    if result["open"] is not None:
        kind, message, _ = result["open"]
        assert path.name in message or str(path) in message, result
        return
    gets = result["gets"]
    assert gets[VICTIM] != "ok", f"{backend}: the truncated sample was returned: {result}"
    assert all(g in ("ok", "CorruptedError", "StowageIOError", "StowageError", "IncompatibleError")
               for g in gets), result
    assert "KeyError" not in gets, f"a truncated sample looks like a missing key: {result}"
    assert result["validate"] is not None
    if isinstance(result["validate"], list):
        assert result["validate"][0] is False, f"validate says clean ({size} -> {offset + 16}): {result}"


def test_a_file_truncated_to_zero_is_a_stowage_error(tmp_path, backend):
    location = _build(tmp_path, backend)
    path, _ = _stored_copies(location, VICTIM)[0]
    with open(path, "r+b") as f:
        f.truncate(0)
    result = _probe_truncated(location, [_key(i) for i in range(N)])
    if result["open"] is None:
        assert result["gets"][VICTIM] != "ok", result
        assert "KeyError" not in result["gets"], result


def test_any_flipped_byte_in_any_file_never_returns_wrong_data(tmp_path, backend):
    """A byte flipped at 10%, 50% and 90% of every file of the cache, one file at a time: each
    sample read is either exact or an error (a StowageError; never a crash, never wrong data).
    A key that goes missing (KeyError) is accepted only when ``validate`` names the damaged
    file: the key index's documented trade-off ("a damaged slot can hide a key, never return
    another's sample")."""
    location = _build(tmp_path, backend)
    root = local_dir(location)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and p.stat().st_size > 0 and not p.name.endswith(".lock"))
    assert files
    work = tmp_path / "work"
    code = f"""
        import json, pathlib, shutil
        import numpy as np
        import stowage
        root = pathlib.Path({str(root)!r})
        work = pathlib.Path({str(work)!r})
        remote = {backend == "remote"!r}
        N = {N}

        def marker(i):
            base = np.frombuffer(b"STOWAGE-MARKER--", dtype=np.float64)
            values = np.arange(64, dtype=np.float64) + 1234567.125 + i * 1000.0
            values[:2] = base
            return values

        bad = []
        cases = 0
        for rel in {files!r}:
            for frac in (0.1, 0.5, 0.9):
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(root, work)
                path = work / rel
                data = bytearray(path.read_bytes())
                at = int(len(data) * frac)
                data[at] ^= 0x5A
                path.write_bytes(bytes(data))
                location = work.as_uri() if remote else str(work)
                cases += 1
                try:
                    cache = stowage.open(location)
                except stowage.StowageError:
                    continue
                try:
                    keys = set(cache.keys())
                except stowage.StowageError:
                    continue
                for i in range(N):
                    key = f"key-{{i:02d}}"
                    try:
                        got = cache.get(key)
                    except stowage.StowageError:
                        continue
                    except KeyError:
                        problems = cache.validate().problems
                        named = [p for p, _, _ in problems if p and p.endswith(rel)]
                        if not named:
                            bad.append([rel, at, key, f"missing; validate does not name the "
                                                      f"file: {{problems}}"])
                        continue
                    if got["m"].tobytes() != marker(i).tobytes() or got["i"].tolist() != [i]:
                        bad.append([rel, at, key, "WRONG DATA"])
                cache.close()
        print("RESULT " + json.dumps({{"cases": cases, "bad": bad}}))
    """
    run = run_python(code, timeout=300)
    assert run.returncode == 0, f"crash or non-stowage error:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    line = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    assert result["cases"] >= 3
    assert result["bad"] == [], f"{backend}: {result['bad']}"
