"""``BatchExtras``: grpolab's per-row loss inputs, one record under one key of TRL's batch.

TRL's ``_prepare_inputs`` shuffles the generation batch (``shuffle_sequence_dict``) and splits it
into micro-batches (``split_tensor_dict``). Both index tensors along the first dimension, but turn
any other value into a list of its rows (``[v[i] for i in permutation]``) and slice that list. The
record indexes like a tensor, so the shuffle leaves a list of one-row records, which
``BatchExtras.of`` stacks back: every field holds exactly the rows a tensor under its own key would.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

KEY = "grpolab"   # the record's key in TRL's batch dict


@dataclass(frozen=True)
class BatchExtras:
    """This process's rows of a generation batch, as the loss reads them: group_ids (B,) (the group
    of each row), rewards (B,) (the combined reward), correct (B,) bool, and the critic's
    old_values (B, T) (V at generation) and returns (B, T) (GAE's value targets), None without one."""

    group_ids: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    correct: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    # the sequence protocol TRL's shuffle and split use (``len``, ``ndim`` > 0, ``[rows]``)
    ndim = 1

    def __len__(self) -> int:
        return len(self.group_ids)

    def __getitem__(self, rows) -> "BatchExtras":
        """The record of ``rows`` (a slice, an index tensor, or one row: then its fields have no batch dimension)."""
        return BatchExtras(*(None if t is None else t[rows] for t in self.tensors()))

    def tensors(self) -> list:
        """The fields in their order (None where absent)."""
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def of(cls, batch: dict) -> "BatchExtras":
        """The record of a micro-batch from what TRL left under ``KEY`` in ``batch``: the record itself,
        or a list of one-row records (after TRL's shuffle) stacked back in their order. A batch
        grpolab did not build (evaluation's, one built by hand) has none: every field None."""
        value = batch.get(KEY)
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        columns = zip(*(row.tensors() for row in value))
        return cls(*(None if column[0] is None else torch.stack(column) for column in columns))
