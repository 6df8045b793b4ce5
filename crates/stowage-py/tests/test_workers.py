"""Readers in threads, forked children and spawned workers all see what the parent sees."""

from __future__ import annotations

import multiprocessing
import pickle
import threading

import numpy as np
import pytest

import stowage
from conftest import (
    N_SMALL,
    assert_same_array,
    build_constant_rows,
    build_small,
    cache_location,
    small_key,
    small_sample,
)

TIMEOUT = 120

# The handle forked children inherit (set by the parent before it forks).
_INHERITED = None


def _read_inherited(key):
    sample = _INHERITED.get(key)
    return key, sample["x"].tobytes(), sample["y"].tobytes(), str(sample["x"].dtype)


def _read_batch_inherited(keys):
    out = {"x": np.zeros((len(keys), 4, 3), np.float32)}
    _INHERITED.get_batch_into(keys, out)
    return out["x"].tobytes()


# A handle pickled to a spawned worker (set by the pool initializer).
_WORKER_CACHE = None


def _init_worker_cache(payload):
    global _WORKER_CACHE
    _WORKER_CACHE = pickle.loads(payload)


def _read_worker_cache(key):
    sample = _WORKER_CACHE.get(key)
    return key, sample["x"].tobytes(), sample["y"].tobytes(), _WORKER_CACHE.mode


def _expected(key):
    i = int(key[1:])
    return key, small_sample(i)["x"].tobytes(), small_sample(i)["y"].tobytes()


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_forked_children_read_the_parents_handle(tmp_path, backend):
    global _INHERITED
    location = build_small(cache_location(tmp_path, backend), backend)
    cache = stowage.open(location)
    try:
        # Read in the parent first, so that whatever state the handle keeps is warm at fork.
        _INHERITED = cache
        parent = [_read_inherited(small_key(i)) for i in range(N_SMALL)]
        ctx = multiprocessing.get_context("fork")
        keys = [small_key(i) for i in range(N_SMALL)]
        with ctx.Pool(2) as pool:
            got = pool.map_async(_read_inherited, keys, chunksize=3).get(TIMEOUT)
            batches = pool.map_async(_read_batch_inherited, [keys[:8], keys[8:16], keys[16:]]).get(
                TIMEOUT
            )
        assert got == parent
        for key, x, y, dtype in got:
            assert (key, x, y) == _expected(key)
            assert dtype == "float32"
        want = b"".join(small_sample(i)["x"].tobytes() for i in range(N_SMALL))
        assert b"".join(batches) == want
        # The parent's handle still works after its children exit.
        assert [_read_inherited(k) for k in keys] == parent
    finally:
        _INHERITED = None
        cache.close()


@pytest.mark.parametrize("backend", ["arrow", "memmap", "remote"])
def test_spawned_workers_reopen_a_pickled_read_handle(tmp_path, backend):
    location = build_small(cache_location(tmp_path, backend), backend)
    with stowage.open(location) as cache:
        payload = pickle.dumps(cache)
        parent = [cache.get(small_key(i)) for i in range(N_SMALL)]
    ctx = multiprocessing.get_context("spawn")
    keys = [small_key(i) for i in range(N_SMALL)]
    with ctx.Pool(2, initializer=_init_worker_cache, initargs=(payload,)) as pool:
        got = pool.map_async(_read_worker_cache, keys, chunksize=4).get(TIMEOUT)
    for (key, x, y, mode), want in zip(got, parent):
        assert mode == "r"
        assert x == want["x"].tobytes() and y == want["y"].tobytes()
        assert (key, x, y) == _expected(key)


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_concurrent_readers_in_threads(tmp_path, backend):
    location = build_small(cache_location(tmp_path, backend), backend)
    keys = [small_key(i) for i in range(N_SMALL)]
    with stowage.open(location) as cache:
        want = {k: cache.get(k) for k in keys}
        errors = []
        barrier = threading.Barrier(4)

        def reader(t):
            try:
                barrier.wait()
                rng = np.random.default_rng(t)
                for round in range(60):
                    k = keys[int(rng.integers(len(keys)))]
                    got = cache.get(k)
                    if got["x"].tobytes() != want[k]["x"].tobytes():
                        errors.append((t, round, k, "get"))
                    if round % 10 == 0:
                        batch_keys = list(rng.choice(keys, 5))
                        out = {"x": np.zeros((5, 4, 3), np.float32)}
                        cache.get_batch_into(batch_keys, out)
                        if out["x"].tobytes() != b"".join(want[b]["x"].tobytes() for b in batch_keys):
                            errors.append((t, round, batch_keys, "get_batch_into"))
                        batch = cache.get_batch(batch_keys)
                        if not np.array_equal(batch["y"], np.stack([want[b]["y"] for b in batch_keys])):
                            errors.append((t, round, batch_keys, "get_batch"))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((t, repr(e)))

        threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive(), "a reader thread hung"
        assert errors == []
        for k in keys:
            assert_same_array(want[k]["x"], small_sample(int(k[1:]))["x"])


def test_a_writer_thread_and_reader_threads(tmp_path):
    # Puts in one thread while others read what is flushed: no crash, readers see whole samples.
    location = cache_location(tmp_path, "arrow")
    build_small(location, "arrow", n=4, finalize=False)
    errors = []
    done = threading.Event()
    with stowage.open(location, mode="a") as writer:
        def write():
            try:
                for i in range(4, 40):
                    writer.put(small_key(i), small_sample(i))
                    if i % 8 == 0:
                        writer.flush()
            except BaseException as e:  # noqa: BLE001
                errors.append(repr(e))
            finally:
                done.set()

        def read():
            try:
                while not done.is_set():
                    for i in range(4):
                        got = writer.get(small_key(i))
                        if got["x"].tobytes() != small_sample(i)["x"].tobytes():
                            errors.append(("read", i))
            except BaseException as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
            assert not t.is_alive()
    assert errors == []
    with stowage.open(location) as cache:
        assert len(cache) == 40


def _sum_inherited(key):
    return float(_INHERITED.get(key)["x"].sum())


ROUNDS = 40


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_fork_while_other_threads_are_reading(tmp_path, backend):
    # A fork can happen while another thread is inside a read (holding whatever lock the
    # backend takes): the children must not inherit a held lock and hang.
    global _INHERITED
    location = build_small(cache_location(tmp_path, backend), backend)
    cache = stowage.open(location)
    _INHERITED = cache
    stop = threading.Event()
    keys = [small_key(i) for i in range(N_SMALL)]

    def hammer():
        out = {"x": np.zeros((N_SMALL, 4, 3), np.float32)}
        while not stop.is_set():
            cache.get_batch_into(keys, out)
            cache.get(keys[3])

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    want = [float(small_sample(i)["x"].sum()) for i in range(N_SMALL)]
    hung = 0
    try:
        ctx = multiprocessing.get_context("fork")
        for _ in range(ROUNDS):
            pool = ctx.Pool(1)
            try:
                result = pool.map_async(_sum_inherited, keys)
                try:
                    assert result.get(5) == want
                except multiprocessing.TimeoutError:
                    # Slow (a loaded machine) or hung: a slow child finishes in the next 15 s.
                    try:
                        assert result.get(15) == want
                    except multiprocessing.TimeoutError:
                        hung += 1
                        break  # one is enough; each costs the timeout
            finally:
                pool.terminate()
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT)
        _INHERITED = None
        cache.close()
    assert hung == 0, (
        f"{backend}: a forked child hung (a lock a parent thread held at the fork stays held in "
        "the child)"
    )


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_get_batch_into_releases_the_gil(tmp_path, backend):
    import time

    location = build_constant_rows(cache_location(tmp_path, backend), backend, 1024)
    with stowage.open(location) as cache:
        keys = [f"k{i % 16}" for i in range(8000)]
        out = {"x": np.empty((len(keys), 1024), np.float32)}
        # Up to 3 tries: on a loaded machine the other thread may not be scheduled in one call.
        for attempt in range(3):
            stamps = []
            stop = threading.Event()

            def tick():
                while not stop.is_set():
                    stamps.append(time.perf_counter())

            thread = threading.Thread(target=tick)
            thread.start()
            time.sleep(0.02)
            t0 = time.perf_counter()
            cache.get_batch_into(keys, out)
            t1 = time.perf_counter()
            stop.set()
            thread.join(TIMEOUT)
            margin = 0.2 * (t1 - t0)
            inside = [s for s in stamps if t0 + margin < s < t1 - margin]
            if inside:
                break
    assert inside, f"{backend}: no other Python thread ran during a {t1 - t0:.3f} s get_batch_into"
    assert out["x"][17, 0] == 1 and out["x"][-1, -1] == (len(keys) - 1) % 16


@pytest.mark.parametrize("backend", ["arrow", "memmap", "npy", "hdf5", "remote"])
def test_puts_from_several_threads_on_one_handle(tmp_path, backend):
    location = cache_location(tmp_path, backend)
    errors = []
    with stowage.create(location, backend=backend, schema={"x": ("int64", [3])}) as cache:
        def writer(t):
            try:
                for i in range(50):
                    cache.put(f"t{t}-{i:02d}", {"x": np.array([t, i, t * 100 + i], np.int64)})
                    if i % 17 == 0:
                        cache.flush()
            except BaseException as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive()
    assert errors == []
    with stowage.open(location) as cache:
        assert len(cache) == 200
        for t in range(4):
            for i in range(50):
                assert cache.get(f"t{t}-{i:02d}")["x"].tolist() == [t, i, t * 100 + i]
        assert cache.validate().clean is True
