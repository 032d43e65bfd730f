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


class Critic:
    """The critic's whole state: its value model, the value model's own optimizer and the count
    of micro-batches it has trained on (the optimizer steps and the warm-up read it)."""

    def __init__(self, model_dir: str, device, lr: float):
        self.model = ValueModel(model_dir).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.micro_steps = 0

    @classmethod
    def of_policy(cls, model, accelerator, lr: float) -> "Critic":
        """A critic initialised from the policy ``model``'s weights, on its accelerator's device."""
        if accelerator.num_processes > 1:
            raise NotImplementedError("the critic axis (gae) is single-process for now: its value model is not "
                                      "wrapped for data parallelism")
        return cls(model.config.name_or_path, accelerator.device, lr)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "micro_steps": self.micro_steps}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.micro_steps = int(state["micro_steps"])

    def values(self, batch: dict, grad: bool) -> torch.Tensor:
        """V(s_t) (B, T) of a batch's completion positions."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.set_grad_enabled(grad):
            return self.model(ids, attn, batch["completion_ids"].size(1))

    def train_on(self, inputs: dict, returns: torch.Tensor, old_values: torch.Tensor | None, value_clip: float,
                 accumulation: int, max_grad_norm: float) -> float:
        """One micro-batch (TRL's batch ``inputs``) of value regression to the GAE targets ``returns``
        (B, T), clipped around the values at generation ``old_values``; the critic's own optimizer
        steps once per gradient-accumulation window of ``accumulation`` micro-batches."""
        loss = value_loss(self.values(inputs, grad=True), returns, inputs["completion_mask"], old_values, value_clip)
        (loss / accumulation).backward()
        self.micro_steps += 1
        if self.micro_steps % accumulation == 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.item()
