"""PyTorch datasets over stowage caches. torch itself is not imported here (nor required) until
:func:`collate` is called.

>>> from stowage.torch import CacheDataset, collate            # doctest: +SKIP
>>> dataset = CacheDataset("/data/cache", fields=["x", "y"])   # doctest: +SKIP
>>> loader = torch.utils.data.DataLoader(                      # doctest: +SKIP
...     dataset, batch_size=256, shuffle=True, num_workers=4, collate_fn=collate)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

import stowage
from stowage import _stowage

__all__ = ["CacheDataset", "collate"]


class CacheDataset:
    """A map-style dataset over a stowage cache: index ``i`` is the sample of ``keys[i]``
    (``keys``, a tuple, defaults to the cache's keys, sorted).

    - ``dataset[i]`` is a dict of field -> writable copy (``copy=False``: the read-only,
      zero-copy arrays ``Cache.get`` returns), passed through ``transform`` when given.
    - ``dataset.__getitems__(indices)``, which torch's DataLoader calls with a whole batch of
      indices, returns one stacked array per field, shape ``(len(indices), *shape)``, filled by
      ``Cache.get_batch_into``: one copy per sample, no Python object per sample. A field whose
      samples differ in shape comes back as a list. ``transform`` is applied to the batch dict.
    - With ``num_workers > 0``: forked workers use the handle opened in the parent (no runtime
      or lock is held across fork); spawned workers get the dataset pickled without its handle
      and reopen the cache by path.

    Pass ``collate_fn=stowage.torch.collate`` to the DataLoader to turn each batch into tensors.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        fields: Optional[Sequence[str]] = None,
        transform: Optional[Callable[[Dict[str, Any]], Any]] = None,
        *,
        keys: Optional[Sequence[str]] = None,
        copy: bool = True,
        checks: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.transform = transform
        self.copy = copy
        self.checks = checks
        self._cache: Optional[stowage.Cache] = stowage.open(self.path, checks=checks)
        schema = self._cache.schema
        tensors = [name for name, spec in schema.items() if spec["kind"] == "tensor"]
        if fields is None:
            fields = tensors
        for name in fields:
            if name not in schema:
                raise stowage.InvalidArgumentError(
                    f"field {name!r} is not in the cache {self.path} (its fields are {list(schema)})"
                )
        self.fields: List[str] = list(fields)
        self._specs = {name: schema[name] for name in self.fields}
        # Fields whose every sample has one shape are filled in place by __getitems__; a
        # nullable one may hold None, so it goes through get_batch with the rest.
        self._fixed: List[Tuple[str, Any, Tuple[int, ...]]] = [
            (name, stowage.numpy_dtype(spec["dtype"]), tuple(spec["shape"]))
            for name, spec in self._specs.items()
            if spec.get("rule") == "fixed" and not spec.get("nullable")
        ]
        # A tuple: the key table built from it on first use must not go stale.
        every = keys if keys is not None else sorted(self._cache.keys())
        self.keys: Tuple[str, ...] = tuple(every)
        self._table: Any = None

    def _handle(self) -> stowage.Cache:
        if self._cache is None:
            self._cache = stowage.open(self.path, checks=self.checks)
        return self._cache

    def __len__(self) -> int:
        return len(self.keys)

    def _key(self, index: int) -> str:
        try:
            return self.keys[index]
        except IndexError:
            raise IndexError(f"index {index} is out of range for {len(self.keys)} samples") from None

    def __getitem__(self, index: int) -> Any:
        sample = self._handle().get(self._key(index))
        out = {}
        for name in self.fields:
            value = sample[name]
            out[name] = np.array(value) if self.copy and isinstance(value, np.ndarray) else value
        return self.transform(out) if self.transform is not None else out

    def __getitems__(self, indices: Sequence[int]) -> Any:
        cache = self._handle()
        out: Dict[str, Any] = {}
        keys = None
        if self._fixed:
            for name, dtype, shape in self._fixed:
                out[name] = np.empty((len(indices), *shape), dtype=dtype)
            try:
                # The keys are looked up in Rust (no str object per sample).
                cache._get_rows_into(self._key_table(), indices, out)
            except (OverflowError, TypeError):
                # Negative or non-integer indices: the list's own indexing rules.
                keys = self._keys_at(indices)
                cache.get_batch_into(keys, out)
        rest = [n for n in self.fields if n not in out]
        if rest:
            batch = cache.get_batch(keys if keys is not None else self._keys_at(indices))
            for name in rest:
                out[name] = batch[name]
        return self.transform(out) if self.transform is not None else out

    def _keys_at(self, indices: Sequence[int]) -> List[str]:
        every = self.keys
        try:
            return [every[i] for i in indices]  # one comprehension: no call per index
        except IndexError:
            return [self._key(i) for i in indices]  # raises, naming the index

    def _key_table(self) -> Any:
        # Built on first use from `keys` (a spawned worker builds its own).
        if self._table is None:
            self._table = _stowage.KeyTable(self.keys)
        return self._table

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None  # a spawned worker reopens the cache by path
        state["_table"] = None
        return state


def collate(batch: Any) -> Any:
    """Turns what ``CacheDataset.__getitems__`` returns (a dict of stacked arrays) into torch
    tensors without copying (``torch.from_numpy``); lists and other values are left as they
    are. Pass it as the DataLoader's ``collate_fn``."""
    import torch

    if isinstance(batch, dict):
        return {name: collate(value) for name, value in batch.items()}
    if isinstance(batch, np.ndarray):
        return torch.from_numpy(batch)
    return batch
