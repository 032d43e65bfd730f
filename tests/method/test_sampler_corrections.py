"""The sampler-correction registry's contract: one entry per value of ``generation.is_correction``
(grpolab.method.sampler_corrections) holds its facts, one function per entry
(grpolab.algorithms.sampler_corrections), the experiment file and the drop-in name the same entry
for the same TRL settings, and each function matches its formula by hand (the generic checks of each
entry, a toy correction and the lint: test_registry_contract.py)."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import pytest
import torch

from grpolab.algorithms.sampler_corrections import sampler_weights
from grpolab.experiment import engines
from grpolab.method.sampler_corrections import (NONE, SAMPLER_CORRECTIONS, logged, trl_names, trl_sampler_correction,
                                                trl_settings)
from grpolab.trainer.dropin import check_sampler_correction
from grpolab.trainer.mlflow_report import dropin_params
from test_engines import two_steps


def test_trls_default_mode_and_modes_are_the_entries():
    from trl import GRPOConfig
    default = inspect.signature(GRPOConfig).parameters["vllm_importance_sampling_mode"].default
    assert trl_settings(NONE, 0.0, 3.0)["vllm_importance_sampling_mode"] == default
    assert engines.GenerationCfg().is_correction == default


@pytest.mark.parametrize("name", list(SAMPLER_CORRECTIONS))
def test_every_entry_is_read_back_by_the_drop_in(name, monkeypatch):
    """Requirement, logged params, TRL mapping; the experiment file's GRPOConfig and the drop-in's
    reading of it name the same entry, and both runs log it alike (the generic checks of an entry:
    test_registry_contract.py)."""
    from trl import GRPOConfig
    entry = SAMPLER_CORRECTIONS[name]
    assert (entry.level is None) == (entry.bound is None) == (entry.needs is None) == (entry.trl_mode is None)
    monkeypatch.setattr(engines, "vllm_installed", lambda: True)
    cfg = two_steps(f"is-{name}", generation__backend="vllm", generation__is_correction=name,
                    generation__is_max=2.0, generation__is_min=0.5)
    kwargs = engines.grpo_kwargs(cfg)
    assert {k: kwargs[k] for k in trl_names(name)} == trl_names(name)
    args = GRPOConfig(output_dir="unused", report_to="none", use_cpu=True, **kwargs)
    assert trl_sampler_correction(args.vllm_importance_sampling_correction, args.vllm_importance_sampling_mode) == name
    check_sampler_correction(args)
    from grpolab.tracking.naming import flat_keys, run_params
    cli = {k: v for k, v in flat_keys(run_params(cfg)).items() if k.startswith("generation.")}
    dropin = {k: v for k, v in dropin_params("grpo", cfg.spec, args, 2, "m", ["r"], "none").items()
              if k.startswith("generation.")}
    assert cli == dropin == {f"generation.{k}": v for k, v in logged(name, 0.5, 2.0).items()}
    assert set(cli) == {"generation.is_correction", *(f"generation.{p}" for p in entry.params)}
    plain = two_steps(f"is-{name}-plain", generation__is_correction=name)   # transformers: the sampler is the policy
    assert not any(k.startswith("generation.") for k in flat_keys(run_params(plain)))


def test_a_mode_trl_does_not_have_is_refused_by_the_drop_in():
    args = SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                           vllm_importance_sampling_mode="token_clip")
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode='token_clip'.*valid: sequence_mask"):
        check_sampler_correction(args)


def _by_hand(name, d, mask, lo, hi):
    """w from the entry's formula, element by element."""
    entry = SAMPLER_CORRECTIONS[name]
    rows = []
    for i in range(d.shape[0]):
        logs = [float(d[i, t]) * float(mask[i, t]) for t in range(d.shape[1])]
        logs = [0.0 if math.isnan(x) else x for x in logs]
        ws = [math.exp(sum(logs))] if entry.level == "sequence" else [math.exp(x) for x in logs]
        if entry.bound == "truncate":
            ws = [min(max(w, lo), hi) for w in ws]
        elif entry.bound == "mask":
            ws = [w if lo <= w <= hi else 0.0 for w in ws]
        else:
            ws = [1.0]
        rows.append(ws)
    return torch.tensor(rows)


@pytest.mark.parametrize("name", list(SAMPLER_CORRECTIONS))
def test_weights_match_the_formula_by_hand(name):
    train = torch.tensor([[-1.0, -0.2, -3.0], [-0.5, -0.5, float("nan")]])
    sampler = torch.tensor([[-1.4, -0.1, -1.0], [-0.9, -0.2, -0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])   # a padded token; a NaN sampler log-prob reads as 0
    w = sampler_weights(train, sampler, mask, name, 0.8, 1.3)
    assert torch.allclose(w, _by_hand(name, train - sampler, mask, 0.8, 1.3), atol=1e-6)
    if SAMPLER_CORRECTIONS[name].bound is not None:   # the bounds act: some weight is clipped or zeroed
        assert not torch.allclose(w, sampler_weights(train, sampler, mask, name, 0.0, 100.0))
