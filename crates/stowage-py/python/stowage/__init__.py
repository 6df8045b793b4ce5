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

# No backend call is inside at a fork (a thread's held lock would stay held in the child):
# stowage._stowage's fork gate closes before it and opens after it.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(
        before=_stowage._before_fork,
        after_in_parent=_stowage._after_fork,
        after_in_child=_stowage._after_fork_in_child,
    )

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
