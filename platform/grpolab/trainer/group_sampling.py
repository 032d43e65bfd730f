"""Group-level sampling of the ``sampling`` axis inside TRL's generation step: DAPO's dynamic
sampling (rounds of TRL's own generation until enough groups vary), the zero-variance filter
(no refill) and GFPO's group filter. A part of ``GrpoLabTrainer``, which hands it each round of
TRL's generation (``Round``); the pure selection logic is ``trainer/sampling.py``.
"""

from __future__ import annotations

import torch

from grpolab import algorithms
from grpolab.errors import warn_at_caller
from grpolab.trainer import sampling
from grpolab.trainer.rollouts import Generated, RolloutRow, SampledBatch, correct_of


class GroupSampling:
    """The ``sampling`` axis of a ``GrpoLabTrainer``: dynamic sampling, the zero-variance filter and
    GFPO's filter. Reads the trainer's public state (spec, accelerator, dataset, prompt draws) and
    logs through its ``record_curve``."""

    def __init__(self, trainer):
        self.trainer = trainer

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        accelerator = self.trainer.accelerator
        return accelerator.gather(t) if accelerator.num_processes > 1 else t

    def _keep_values(self, rewards_k: torch.Tensor, rows: list[RolloutRow]) -> torch.Tensor:
        """Per-row values a group must disagree on to be kept (``method.sampling_filter``)."""
        spec = self.trainer.spec
        total = algorithms.combine_rewards(rewards_k, spec.reward_weights)
        return sampling.filter_values(spec.sampling_filter, total, correct_of(rows))

    def dynamic(self, inputs, run_round) -> SampledBatch:
        """DAPO dynamic sampling: generate rounds of groups (TRL's own generation and scoring)
        until the global batch holds ``target`` groups whose accuracy (or reward, per
        ``sampling_filter``) varies, or the cap is hit, then rebuild one batch of exactly the
        configured size. Decisions use gathered values, so every rank keeps the same groups and
        ends with the same number of rows. ``run_round(inputs) -> Round``: one round of TRL's
        generation and scoring."""
        trainer = self.trainer
        spec, record = trainer.spec, trainer.record_curve
        G, n_local, nproc = trainer.num_generations, len(inputs), trainer.accelerator.num_processes
        if n_local % G:
            raise NotImplementedError("dynamic sampling needs whole groups on each process "
                                      f"({n_local} rows per process, group size {G})")
        target = n_local * nproc // G
        pool, rewards, rows, round_inputs = [], [], [], inputs
        entropy = torch.zeros(2, dtype=torch.float64, device="cpu")   # a Round's entropy sums are on the CPU
        for round_no in range(1, spec.max_sampling_rounds + 1):
            done = run_round(round_inputs)
            entropy += done.entropy
            pool.append(self._gather_rows(done.out))
            rewards.append(done.scored.rewards)
            rows.extend(done.scored.rows)
            values = self._keep_values(torch.cat(rewards), rows)
            if int((sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).sum()) >= target:
                break
            round_inputs = self._fresh_inputs(n_local)
        groups, filled = sampling.select_groups(values, G, target, spec.sampling_cap_policy)
        if filled:
            warn_at_caller(f"dynamic sampling: round cap {spec.max_sampling_rounds} reached, "
                           f"{filled} of {target} groups are zero-variance fill-ins")
        keep = sampling.rows_of_groups(groups, G)
        merged = sampling.take_rows(sampling.concat_batches(pool, trainer.processing_class.pad_token_id), keep)
        start = trainer.accelerator.process_index * n_local
        local = {k: v[start:start + n_local] for k, v in merged.items()}
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        local["num_items_in_batch"] = loss_mask.sum()   # the whole final batch, all processes
        local["advantages"] = torch.zeros(n_local, device=merged["completion_mask"].device)
        kept = set(keep.tolist())
        record("sampling/rounds", float(round_no))
        record("sampling/kept_fraction", target / (len(rows) // G))
        record("sampling/filled_groups", float(filled))
        record("sampling/discarded_tokens", float(sum(r.length for i, r in enumerate(rows) if i not in kept)))
        all_rewards = torch.cat(rewards)
        return SampledBatch(local, all_rewards[keep.to(all_rewards.device)], [rows[i] for i in keep.tolist()],
                            Generated(all_rewards, rows, entropy))

    def _gather_rows(self, out: dict) -> dict:
        """Row-aligned tensors of every process, padded to a common width, in rank order."""
        fields = {k: v for k, v in out.items() if k not in sampling.RECOMPUTED}
        accelerator = self.trainer.accelerator
        if accelerator.num_processes == 1:
            return fields
        gathered = {}
        for key, value in fields.items():
            left = key in sampling.LEFT_PADDED
            pad = self.trainer.processing_class.pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            value = accelerator.pad_across_processes(value, dim=1, pad_index=pad, pad_first=left)
            gathered[key] = accelerator.gather(value)
        return gathered

    def _fresh_inputs(self, n_rows: int) -> list[dict]:
        """n_rows / G fresh prompts from the training set, each repeated G times (the trainer's ``prompt_draws``)."""
        trainer = self.trainer
        G, dataset = trainer.num_generations, trainer.train_dataset
        picks = trainer.prompt_draws.draw(n_rows // G, len(dataset))
        return [dict(dataset[int(i)]) for i in picks for _ in range(G)]

    def filter_zero_variance(self, out: dict, rewards_k: torch.Tensor, rows: list[RolloutRow]) -> None:
        """No refill: groups whose accuracy (or reward) does not vary leave the loss and the normaliser."""
        G, n_local = self.trainer.num_generations, out["completion_ids"].size(0)
        values = self._keep_values(rewards_k, rows)
        informative = (sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).repeat_interleave(G)
        start = self.trainer.accelerator.process_index * n_local
        keep = informative[start:start + n_local].to(out["completion_mask"].device)
        out["completion_mask"] = out["completion_mask"] * keep.unsqueeze(1).to(out["completion_mask"].dtype)
        local_items = (out["completion_mask"] * out.get("tool_mask", 1)).sum()
        out["num_items_in_batch"] = self._gather(local_items.unsqueeze(0)).sum()
        self.trainer.record_curve("sampling/kept_fraction", informative.float().mean().item())

    def gfpo(self, out: dict, rewards: torch.Tensor, start: int) -> sampling.GfpoFiltered:
        """GFPO's group filter (``sampling.gfpo_filter``); its curves."""
        trainer = self.trainer
        kept = sampling.gfpo_filter(out, rewards, trainer.spec, trainer.num_generations, start, self._gather)
        trainer.record_curve("sampling/kept_fraction", kept.kept_fraction)
        trainer.record_curve("gfpo/length_gap", kept.length_gap)
        return kept
