"""Numerics that a GPU run meets and a small CPU run does not: bf16 log-probs enter the loss
upcast to float32, and the top-entropy quantile works past torch.quantile's 2^24-element limit
with torch.quantile's own values below it."""

import pytest
import torch

from grpolab.algorithms import entropy_mask, LossInputs, policy_loss, quantile
from grpolab.method.registry import METHODS
from grpolab.method.spec import build_spec


def _inputs(dtype):
    gen = torch.Generator(device="cpu").manual_seed(0)
    logp = -torch.rand(6, 5, generator=gen, device="cpu") * 3
    old = logp + (torch.rand(6, 5, generator=gen, device="cpu") - 0.5) * 0.02
    ref = logp + (torch.rand(6, 5, generator=gen, device="cpu") - 0.5) * 0.2
    mask = torch.ones(6, 5, device="cpu")
    mask[::2, 3:] = 0
    A = torch.randn(6, generator=gen, device="cpu")
    return logp.to(dtype), old.to(dtype), ref.to(dtype), mask, A


@pytest.mark.parametrize("method", ["grpo", "dapo", "gspo", "cisco"])
def test_bf16_log_probs_are_upcast_before_the_ratio(method):
    """The loss of bf16 log-probs is the float32 loss of the same (bf16-rounded) values, to the bit:
    exp(logp - old_logp) of nearby bf16 numbers computed in bf16 would lose the ratio's 1% moves."""
    spec = METHODS[method].spec()
    logp, old, ref, mask, A = _inputs(torch.bfloat16)
    loss, stats = policy_loss(spec, LossInputs(logp, old, A, mask, ref))
    up_loss, up_stats = policy_loss(spec, LossInputs(logp.float(), old.float(), A, mask, ref.float()))
    assert loss.dtype == torch.float32 and torch.equal(loss, up_loss)
    nan_as_text = lambda d: {k: "nan" if v != v else v for k, v in d.items()}   # noqa: E731 (nan != nan)
    assert nan_as_text(stats) == nan_as_text(up_stats) and "kl" in stats


def test_fp32_and_fp64_inputs_are_left_as_they_are():
    spec = build_spec({"kl_coef": 0.1})
    logp, old, ref, mask, A = _inputs(torch.float64)
    assert policy_loss(spec, LossInputs(logp, old, A, mask, ref))[0].dtype == torch.float64


def test_quantile_equals_torch_quantile_on_random_inputs():
    gen = torch.Generator(device="cpu").manual_seed(1)
    for n in (1, 2, 3, 7, 64, 1001):
        for draw in (torch.rand, torch.randn):
            values = draw(n, generator=gen, device="cpu")
            for q in (0.0, 0.2, 0.5, 0.8, 0.99, 1.0):
                assert torch.equal(quantile(values, q), torch.quantile(values, q)), (n, q)
    ties = torch.randint(0, 4, (50,), generator=gen, device="cpu").float()
    assert torch.equal(quantile(ties, 0.8), torch.quantile(ties, 0.8))


def test_the_entropy_mask_works_past_torch_quantiles_limit():
    """2^24 + 1 valid tokens (64 MB of float32): torch.quantile refuses them; the mask keeps the top 20%."""
    n = 2 ** 24 + 1
    entropies = torch.arange(n, dtype=torch.float32, device="cpu").view(1, -1)
    with pytest.raises(RuntimeError, match="too large"):
        torch.quantile(entropies.view(-1), 0.8)
    kept = entropy_mask(entropies, torch.ones_like(entropies), 0.2)
    # the 0.8 quantile of 0..n-1 is 0.8 (n - 1) = 13421772.8 in float32 arithmetic: 13421773 and up are kept
    assert int(kept.sum()) == n - 13421773 and bool(kept[0, -1]) and not bool(kept[0, 13421772])
