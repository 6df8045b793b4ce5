"""The exceptions stowage raises: one class per category of ``stowage_core::Error``.

Every class derives from :class:`StowageError`, which carries the file (``path``), the sample key
(``key``) and what is wrong (``detail``) when they are known, and from the built-in exception a
Python caller would catch for the same trouble (``ValueError``, ``FileNotFoundError``, ...).
A missing key is a plain :class:`KeyError`.
"""

from __future__ import annotations

from typing import Optional


class StowageError(Exception):
    """Base class of every error stowage raises (besides ``KeyError`` for a missing key).

    >>> error = StowageError("corrupted data in /c/rows.bin", path="/c/rows.bin", detail="xxh3 differs")
    >>> (error.path, error.key, error.detail)
    ('/c/rows.bin', None, 'xxh3 differs')
    """

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        key: Optional[str] = None,
        detail: Optional[str] = None,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.key = key
        self.detail = detail if detail is not None else message
        self.field = field

    def __str__(self) -> str:
        return self.message


class CorruptedError(StowageError):
    """Stored bytes do not match what was written: ``path`` is the file, ``key`` the sample
    (when known), ``detail`` what mismatched, with both sides. No data is returned."""


class SchemaMismatchError(StowageError, ValueError):
    """A sample or array does not match the schema; ``field`` names the field. Nothing was
    written."""


class UnsupportedError(StowageError, NotImplementedError):
    """The backend does not do this (see ``Cache.capabilities``)."""


class FinalizedError(StowageError):
    """A write to a finalized cache: open it in append mode, or rebuild it."""


class PoisonedError(StowageError):
    """The handle refuses writes after an earlier failure; reopen the cache to resume."""


class IncompatibleError(StowageError):
    """A valid file in a form this version cannot use (format version, schema, options)."""


class LockedError(StowageError):
    """Another writer holds the cache's lock; readers are not affected."""


class CacheNotFoundError(StowageError, FileNotFoundError):
    """A cache or file that was asked for does not exist."""


class CacheExistsError(StowageError, FileExistsError):
    """Creating a cache where one already is."""


class InvalidArgumentError(StowageError, ValueError):
    """An argument is out of range or inconsistent."""


class StowageIOError(StowageError, OSError):
    """An operating-system I/O error on a named file."""


class InternalError(StowageError):
    """A bug in stowage (a Rust panic), caught before it could reach the interpreter. Please
    report it with the message."""


__all__ = [
    "StowageError",
    "CorruptedError",
    "SchemaMismatchError",
    "UnsupportedError",
    "FinalizedError",
    "PoisonedError",
    "IncompatibleError",
    "LockedError",
    "CacheNotFoundError",
    "CacheExistsError",
    "InvalidArgumentError",
    "StowageIOError",
    "InternalError",
]
