"""stowage: one API over the ML sample caches of hangar, DNANet, torchcachex and aenet, and
stowage's own: zero-copy numpy reads, checksums on every read, crash-safe writes.

>>> import numpy as np, stowage, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "cache")
>>> with stowage.create(path, backend="arrow", schema={"x": ("float32", [3])}) as cache:
...     cache.put("a", {"x": np.arange(3, dtype=np.float32)})
>>> with stowage.open(path) as cache:
...     cache["a"]["x"].tolist(), len(cache), "a" in cache
([0.0, 1.0, 2.0], 1, True)

PyTorch users: :class:`stowage.torch.CacheDataset` (torch is not a dependency).
"""

from stowage._errors import (
    CacheExistsError,
    CacheNotFoundError,
    CorruptedError,
    FinalizedError,
    IncompatibleError,
    InternalError,
    InvalidArgumentError,
    LockedError,
    PoisonedError,
    SchemaMismatchError,
    StowageError,
    StowageIOError,
    UnsupportedError,
)
from stowage._stowage import (
    DTYPES,
    Cache,
    ValidationReport,
    __version__,
    backends,
    convert,
    create,
    numpy_dtype,
    open,
)

import os as _os

from stowage import _stowage

# stowage._stowage's fork gate (no backend call inside at a fork) is not registered with
# os.register_at_fork yet: with it, a fork while other threads read deadlocked in the tests.
# Until that is fixed, a fork while another thread reads an hdf5 cache can hang the child.

__all__ = [
    "DTYPES",
    "Cache",
    "ValidationReport",
    "__version__",
    "backends",
    "convert",
    "create",
    "numpy_dtype",
    "open",
    "CacheExistsError",
    "CacheNotFoundError",
    "CorruptedError",
    "FinalizedError",
    "IncompatibleError",
    "InternalError",
    "InvalidArgumentError",
    "LockedError",
    "PoisonedError",
    "SchemaMismatchError",
    "StowageError",
    "StowageIOError",
    "UnsupportedError",
]
