"""Type stubs of the ``stowage`` package: one API over the ML sample caches of hangar, DNANet,
torchcachex and aenet, and stowage's own."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

PathLike = Union[str, "os.PathLike[str]"]
#: One field's value as ``get`` returns it: a read-only array for a tensor, ``bytes`` for a bytes
#: field, ``str`` for a JSON field, ``None`` for a null.
FieldValue = Union[npt.NDArray[Any], bytes, str, None]
#: A field of a schema: ``("float32", [512])`` (fixed shape), ``{"dtype": "float32", "shape":
#: [None, 3]}`` (ragged leading dimension), ``{"dtype": "int64", "max_shape": [128]}``,
#: ``{"dtype": "float32", "shape": None}`` (any shape), ``{"dtype": ..., "nullable": True}``,
#: ``"bytes"`` or ``"json"``.
FieldSpec = Union[str, Tuple[str, Optional[Sequence[Optional[int]]]], Mapping[str, Any]]

#: The dtype names schemas and ``Cache.schema`` use.
DTYPES: Tuple[str, ...]

class StowageError(Exception):
    """Base class of every error stowage raises (besides ``KeyError`` for a missing key)."""

    path: Optional[str]
    key: Optional[str]
    detail: str

class CorruptedError(StowageError):
    """Stored bytes do not match what was written: ``path`` is the file, ``key`` the sample
    (when known), ``detail`` what mismatched, with both sides."""

class SchemaMismatchError(StowageError, ValueError):
    """A sample or array does not match the schema; ``field`` names the field. Nothing was
    written."""

    field: str

class UnsupportedError(StowageError, NotImplementedError):
    """The backend does not do this (see ``Cache.capabilities``)."""

class FinalizedError(StowageError):
    """A write to a finalized cache."""

class PoisonedError(StowageError):
    """The handle refuses writes after an earlier failure; reopen the cache."""

class IncompatibleError(StowageError):
    """A valid file in a form this version cannot use."""

class LockedError(StowageError):
    """Another writer holds the cache's lock."""

class CacheNotFoundError(StowageError, FileNotFoundError):
    """A cache or file that was asked for does not exist."""

class CacheExistsError(StowageError, FileExistsError):
    """Creating a cache where one already is."""

class InvalidArgumentError(StowageError, ValueError):
    """An argument is out of range or inconsistent."""

class StowageIOError(StowageError, OSError):
    """An operating-system I/O error on a named file."""

class InternalError(StowageError):
    """A bug in stowage (a Rust panic), caught before it could reach the interpreter."""

class ValidationReport:
    """What ``Cache.validate`` found."""

    clean: bool
    undamaged: bool
    samples_checked: int
    files_checked: int
    #: ``(path, key, detail)`` of each problem.
    problems: List[Tuple[Optional[str], Optional[str], str]]
    #: One line per file of data another writer added, which stowage's checksums do not cover.
    unchecked: List[str]

class Cache:
    """An open cache. Use it as a context manager; ``close`` releases it (arrays returned by
    ``get`` stay valid after it)."""

    path: str
    backend: str
    format: str
    mode: Literal["r", "a", "w"]
    checks: bool
    #: The schema, in the dict form ``create`` takes (fields in order).
    schema: Dict[str, Dict[str, Any]]
    #: The backend's capabilities by name (``zero_copy``, ``append``, ...).
    capabilities: Dict[str, bool]
    finalized: bool
    closed: bool

    def get(self, key: str) -> Dict[str, FieldValue]: ...
    def get_batch(self, keys: Sequence[str]) -> Dict[str, Union[npt.NDArray[Any], List[FieldValue]]]: ...
    def get_batch_into(self, keys: Sequence[str], out: Mapping[str, npt.NDArray[Any]]) -> None: ...
    def put(self, key: str, sample: Mapping[str, Any]) -> None: ...
    def put_batch(
        self, items: Union[Mapping[str, Mapping[str, Any]], Iterable[Tuple[str, Mapping[str, Any]]]]
    ) -> None: ...
    def flush(self) -> None: ...
    def finalize(self) -> None: ...
    def validate(self, level: Literal["structure", "full"] = "full") -> ValidationReport: ...
    def keys(self) -> List[str]: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object) -> bool: ...
    def __getitem__(self, key: str) -> Dict[str, FieldValue]: ...
    def __enter__(self) -> Cache: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

def open(path: PathLike, mode: Literal["r", "a"] = "r", *, checks: bool = True) -> Cache: ...
def create(
    path: PathLike, backend: str = "arrow", schema: Optional[Mapping[str, FieldSpec]] = None, **options: Any
) -> Cache: ...
def convert(
    src: PathLike, dst: PathLike, to: str, *, verify: bool = False, flush_every: int = 1024, merge: bool = False
) -> str: ...
def backends() -> List[str]: ...
def numpy_dtype(name: str) -> np.dtype[Any]: ...
