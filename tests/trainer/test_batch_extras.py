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
    assert all(t is None for t in BatchExtras.of(base).tensors()) and len(BatchExtras()) == 0


def test_the_shuffle_takes_row_handles_and_of_selects_them_once_bit_identical_to_stacking():
    base, fields = _batch(critic=True)
    record = BatchExtras(**fields)
    torch.manual_seed(0)
    micro = split_tensor_dict(shuffle_sequence_dict({**base, batch_extras.KEY: record}), 2)[1]
    rows = micro[batch_extras.KEY]
    assert all(isinstance(r, batch_extras.RowOf) and r.record is record for r in rows)   # no per-row tensors
    order = [r.index for r in rows]
    selected = BatchExtras.of(micro)
    assert micro[batch_extras.KEY] is selected and BatchExtras.of(micro) is selected   # the reuse passes select no more
    for name, t in fields.items():
        stacked = torch.stack([t[i] for i in order])
        value = getattr(selected, name)
        assert value.dtype == stacked.dtype and value.shape == stacked.shape and torch.equal(value, stacked), name


def test_an_empty_or_mixed_row_list_raises_and_the_record_is_no_batch_size_source():
    import pytest
    record = BatchExtras(**_batch(critic=False)[1])
    with pytest.raises(ValueError, match="empty list of rows"):
        BatchExtras.of({batch_extras.KEY: []})
    with pytest.raises(ValueError, match="different records"):
        BatchExtras.of({batch_extras.KEY: [record[0], BatchExtras(**_batch(critic=False)[1])[1]]})
    assert BatchExtras.NAMES == ("group_ids", "rewards", "correct", "old_values", "returns")
    assert not hasattr(record, "shape")   # why TRL's split must read its chunk size from another value


def test_the_record_is_never_the_first_value_of_the_batches_trl_splits(tiny_model_dir, tmp_path):
    """TRL's split reads the micro-batch size from the first non-None value's ``.shape[0]``: the
    record, added last to TRL's dict by the rollout stages, must never be that value (training and
    evaluation batches alike)."""
    import datasets
    from trl import GRPOConfig
    from grpolab import GrpoLabTrainer
    data = datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="] * 2, "answer": list("2468") * 2})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", max_steps=1, per_device_train_batch_size=8,
                      per_device_eval_batch_size=8, num_generations=4, num_generations_eval=2, max_completion_length=4,
                      use_cpu=True, bf16=False, disable_tqdm=True, save_strategy="no", seed=0, top_k=0)

    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    trainer = GrpoLabTrainer(model=str(tiny_model_dir), reward_funcs=[length], args=args, train_dataset=data,
                             eval_dataset=data, method="dapo", correctness="answer")
    batches, original = [], trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(original(inputs)) or batches[-1]
    trainer.train()
    trainer.evaluate()
    assert len(batches) >= 2
    for batch in batches:
        first = next(v for v in batch.values() if v is not None)
        assert isinstance(batch[batch_extras.KEY], BatchExtras) and not isinstance(first, BatchExtras)
        assert isinstance(first, torch.Tensor) and first.shape[0] == len(batch[batch_extras.KEY])


def test_a_critic_batch_without_value_targets_fails_by_name():
    from types import SimpleNamespace
    import pytest
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    trainer = SimpleNamespace(critic=object())   # the check comes before the critic is used
    with pytest.raises(RuntimeError, match=r"critic: the batch has no value targets \(returns\)"):
        GrpoLabTrainer._train_critic(trainer, {}, BatchExtras(), {})
