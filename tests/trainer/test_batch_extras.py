"""grpolab's per-row loss inputs ride in TRL's batch as one ``BatchExtras`` record: after TRL 1.16's
own shuffle and split, each micro-batch's record holds exactly the rows its fields would hold as
tensors under their own keys."""

import torch
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from grpolab.trainer import batch_extras
from grpolab.trainer.batch_extras import BatchExtras


def _batch(critic: bool) -> tuple[dict, dict]:
    B, T = 8, 3
    fields = {"group_ids": torch.arange(B) // 4, "rewards": torch.linspace(-1, 1, B), "correct": torch.arange(B) % 3 == 0}
    if critic:
        fields |= {"old_values": torch.randn(B, T), "returns": torch.randn(B, T)}
    base = {"prompt_ids": torch.arange(B * 2).view(B, 2), "advantages": torch.randn(B),
            "num_items_in_batch": torch.tensor(17)}
    return base, fields


def test_the_record_survives_trls_shuffle_and_split_as_separate_keys_would():
    for critic in (False, True):
        base, fields = _batch(critic)
        torch.manual_seed(0)
        separate = split_tensor_dict(shuffle_sequence_dict({**base, **fields}), 2)
        torch.manual_seed(0)
        together = split_tensor_dict(shuffle_sequence_dict({**base, batch_extras.KEY: BatchExtras(**fields)}), 2)
        for loose, packed in zip(separate, together, strict=True):
            assert torch.equal(loose["prompt_ids"], packed["prompt_ids"])
            record = BatchExtras.of(packed)
            for name in ("group_ids", "rewards", "correct", "old_values", "returns"):
                value = getattr(record, name)
                if name in fields:
                    assert value.dtype == loose[name].dtype and torch.equal(value, loose[name]), name
                else:
                    assert value is None


def test_a_split_without_shuffle_slices_the_record_and_a_batch_without_one_has_none():
    base, fields = _batch(critic=True)
    first, second = split_tensor_dict({**base, batch_extras.KEY: BatchExtras(**fields)}, 2)
    assert torch.equal(BatchExtras.of(second).returns, fields["returns"][4:])
    assert BatchExtras.of(base) == BatchExtras()


def test_a_critic_batch_without_value_targets_fails_by_name():
    from types import SimpleNamespace
    import pytest
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    trainer = SimpleNamespace(critic=object())   # the check comes before the critic is used
    with pytest.raises(RuntimeError, match=r"critic: the batch has no value targets \(returns\)"):
        GrpoLabTrainer._train_critic(trainer, {}, BatchExtras(), {})
