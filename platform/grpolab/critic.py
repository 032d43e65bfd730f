"""A learned value model for the critic axis (PPO, VAPO): a transformer backbone plus a scalar
head, initialised from the policy's own weights (VAPO warms its critic from a trained model; the
toy world's warm-started policy plays that role). No TRL here.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel


class ValueModel(nn.Module):
    """V(s_t) for every completion position: the hidden state that predicts completion token t
    (position P + t - 1) maps to the value of the state before token t is generated."""

    def __init__(self, model_dir: str):
        super().__init__()
        self.backbone = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
        self.head = nn.Linear(self.backbone.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_len: int) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden[:, -completion_len - 1:-1]).squeeze(-1)   # (B, T)


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               old_values: torch.Tensor | None = None, clip: float = 0.0) -> torch.Tensor:
    """0.5 * (V_t - R_t)^2 averaged over valid tokens. With ``clip`` > 0 (PPO value clipping):
    V'_t = V_old + clamp(V_t - V_old, -clip, clip) and the loss is 0.5 * max((V - R)^2, (V' - R)^2)."""
    m = mask.to(values.dtype)
    err = (values - returns) ** 2
    if clip > 0:
        if old_values is None:
            raise ValueError("value clipping needs the values of the rollout (old_values)")
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.max(err, (clipped - returns) ** 2)
    return 0.5 * (err * m).sum() / m.sum().clamp(min=1.0)
