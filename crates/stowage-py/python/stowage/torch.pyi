"""Type stubs of ``stowage.torch``."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

class CacheDataset:
    """A map-style dataset over a stowage cache; see the module's documentation."""

    path: str
    fields: List[str]
    keys: Tuple[str, ...]
    transform: Optional[Callable[[Dict[str, Any]], Any]]
    copy: bool
    checks: bool

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        fields: Optional[Sequence[str]] = None,
        transform: Optional[Callable[[Dict[str, Any]], Any]] = None,
        *,
        keys: Optional[Sequence[str]] = None,
        copy: bool = True,
        checks: bool = True,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...
    def __getitems__(self, indices: Sequence[int]) -> Any: ...

def collate(batch: Any) -> Any: ...
