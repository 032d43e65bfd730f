"""``BatchExtras``: grpolab's per-row loss inputs, one record under one key of TRL's batch.

TRL's ``_prepare_inputs`` shuffles the generation batch (``shuffle_sequence_dict``) and splits it
into micro-batches (``split_tensor_dict``). The shuffle permutes the tensors of ndim >= 1 along the
first dimension and turns any other value into the list of its rows (``[v[i] for i in permutation]``,
``i`` a 0-d index tensor); the split slices anything with ndim > 0 (tensors, the record) or a list,
in chunks whose size it reads from the ``.shape[0]`` of the batch's first non-None value, so the
record, which has no ``shape``, must never be that first value. A record indexed by one row gives a
``RowOf`` handle (no tensor work), and ``BatchExtras.of`` selects a micro-batch's rows from the
parent record in one ``index_select`` per field: every field holds exactly the rows a tensor under
its own key would.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, NamedTuple

import torch

KEY = "grpolab"   # the record's key in TRL's batch dict


@dataclass(frozen=True, eq=False)   # tensor fields: == would be elementwise, so records compare by identity
class BatchExtras:
    """This process's rows of a generation batch, as the loss reads them: group_ids (B,) (the group
    of each row), rewards (B,) (the combined reward), correct (B,) bool, and the critic's
    old_values (B, T) (V at generation) and returns (B, T) (GAE's value targets), None without one."""

    group_ids: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    correct: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    NAMES: ClassVar[tuple[str, ...]] = ()   # the fields' names in order, set below the class
    # the sequence protocol TRL's shuffle and split use (``len``, ``ndim`` > 0, ``[rows]``)
    ndim: ClassVar[int] = 1

    def __len__(self) -> int:
        return 0 if self.group_ids is None else len(self.group_ids)

    def __getitem__(self, rows) -> "BatchExtras | RowOf":
        """The record of ``rows`` (a slice or an index tensor); one row (an int, or a 0-d tensor as
        TRL's shuffle passes it) gives its ``RowOf`` handle, which ``of`` selects from the record."""
        if isinstance(rows, int) or (isinstance(rows, torch.Tensor) and rows.ndim == 0):
            return RowOf(self, int(rows))
        return BatchExtras(*(None if t is None else t[rows] for t in self.tensors()))

    def tensors(self) -> list:
        """The fields in their order (None where absent)."""
        return [getattr(self, name) for name in self.NAMES]

    def select(self, rows: list[int]) -> "BatchExtras":
        """The record of ``rows`` in their order: one ``index_select`` per field, the index on the
        field's device."""
        return BatchExtras(*(None if t is None else t.index_select(0, torch.as_tensor(rows, device=t.device))
                             for t in self.tensors()))

    @classmethod
    def of(cls, batch: dict) -> "BatchExtras":
        """The record of a micro-batch from what TRL left under ``KEY`` in ``batch``: the record itself,
        or (after TRL's shuffle) a list of ``RowOf`` handles, selected from their record and stored
        back under ``KEY`` (TRL reuses the micro-batch's dict over ``num_iterations``: the later
        passes find the record). A batch grpolab did not build (one built by hand) has none: every
        field None."""
        value = batch.get(KEY)
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if len(value) == 0:
            raise ValueError(f"the batch's {KEY!r} entry is an empty list of rows: a micro-batch has at least one")
        parent = value[0].record
        if any(row.record is not parent for row in value):
            raise ValueError(f"the batch's {KEY!r} rows come from different records")
        record = parent.select([row.index for row in value])
        batch[KEY] = record
        return record


BatchExtras.NAMES = tuple(f.name for f in fields(BatchExtras))


class RowOf(NamedTuple):
    """One row of a ``BatchExtras`` record as TRL's shuffle takes it: the record and the row's index."""
    record: BatchExtras
    index: int
