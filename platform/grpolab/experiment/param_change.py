"""How far training has moved the policy from where the run started, in parameter space:

    policy/param_change(t) = ||theta_t - theta_0||_2 / ||theta_0||_2

over the trainable parameters (a LoRA run: its adapter's), theta_0 as they were when the trainer was
built, before any step or checkpoint load. Unlike a held-out score it sits at no floor: any update moves
it, and it is exactly 0 only when no update changed a parameter. theta_0 is kept on the CPU in the
parameters' own dtype; the distance is taken on each parameter's device at each held-out evaluation.
Sharded parameters (FSDP, ZeRO-3) are whole on no process: there it is not taken, and a run tag says so;
nor with eval.param_change false (theta_0 costs the trainable parameters' bytes in host memory).
"""

from __future__ import annotations

import math

import torch

KEY = "policy/param_change"
TAG = "grpolab.param_change"


def not_measured(wanted: bool, trainer) -> str:
    """Why the run does not take policy/param_change ('' when it does): the run tag's text."""
    if not wanted:
        return "not measured: eval.param_change is false"
    return "not measured: the parameters are sharded (FSDP or ZeRO-3)" if sharded(trainer) else ""


def sharded(trainer) -> bool:
    """Whether the trainer's parameters are split across processes (no process holds them whole)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None) if trainer.is_deepspeed_enabled else None
    return plugin is not None and plugin.zero_stage == 3


class ParamChange:
    """theta_0 of a model's trainable parameters, and the relative distance of the model from it."""

    def __init__(self, model):
        self.start = {name: p.detach().to("cpu", copy=True)
                      for name, p in model.named_parameters() if p.requires_grad}
        self.start_norm = math.sqrt(sum(float(p.double().pow(2).sum()) for p in self.start.values()))

    def of(self, model) -> float:
        """||theta - theta_0|| / ||theta_0|| of ``model``'s trainable parameters now (theta_0 in each
        parameter's dtype now, so a cast alone, e.g. DeepSpeed's to bf16, is no movement; differences in
        float32, summed in float64); NaN when theta_0 is all zeros (no scale to be relative to)."""
        if self.start_norm == 0.0:
            return math.nan
        now = {name: p for name, p in model.named_parameters() if name in self.start}
        if len(now) != len(self.start):
            raise RuntimeError(f"{KEY}: the model no longer has {len(self.start) - len(now)} of the trainable "
                               f"parameters it started with, e.g. {sorted(set(self.start) - set(now))[:3]}")
        with torch.no_grad():
            total = sum(float((p.detach().float() - self.start[name].to(p.device, p.dtype).float())
                              .pow(2).sum(dtype=torch.float64)) for name, p in now.items())
        return math.sqrt(total) / self.start_norm
