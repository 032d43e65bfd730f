"""Group-level sampling of the ``sampling`` axis inside TRL's generation step: DAPO's dynamic
sampling (rounds of TRL's own generation until enough groups vary), the zero-variance filter
(no refill) and GFPO's group filter. A mixin of ``GrpoLabTrainer``; the pure selection logic is ``trainer/sampling.py``.
"""

from __future__ import annotations

import torch

from grpolab import algorithms
from grpolab.errors import warn_at_caller
from grpolab.trainer import sampling
from grpolab.trainer.rollouts import Generated, RolloutRow, SampledBatch, correct_of


class GroupSampling:
    """The ``sampling`` axis of ``GrpoLabTrainer``: dynamic sampling and the zero-variance filter."""

    def _keep_values(self, rewards_k: torch.Tensor, rows: list[RolloutRow]) -> torch.Tensor:
        """Per-row values a group must disagree on to be kept (``method.sampling_filter``)."""
        total = algorithms.combine_rewards(rewards_k, self.spec.reward_weights)
        return sampling.filter_values(self.spec.sampling_filter, total, correct_of(rows))

    def _dynamic_sampling(self, inputs) -> SampledBatch:
        """DAPO dynamic sampling: generate rounds of groups (TRL's own generation and scoring)
        until the global batch holds ``target`` groups whose accuracy (or reward, per
        ``sampling_filter``) varies, or the cap is hit, then rebuild one batch of exactly the
        configured size. Decisions use gathered values, so every rank keeps the same groups and
        ends with the same number of rows."""
        G, n_local, nproc = self.num_generations, len(inputs), self.accelerator.num_processes
        if n_local % G:
            raise NotImplementedError("dynamic sampling needs whole groups on each process "
                                      f"({n_local} rows per process, group size {G})")
        target = n_local * nproc // G
        pool, rewards, rows, round_inputs = [], [], [], inputs
        entropy = torch.zeros(2, dtype=torch.float64, device="cpu")   # _entropy_sums returns CPU sums
        for round_no in range(1, self.spec.max_sampling_rounds + 1):
            out = self._trl_round(round_inputs)
            entropy += self._entropy_sums(out)
            pool.append(self._gather_rows(out))
            rewards.append(self._scored.rewards)
            rows.extend(self._scored.rows)
            values = self._keep_values(torch.cat(rewards), rows)
            if int((sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).sum()) >= target:
                break
            round_inputs = self._fresh_inputs(n_local)
        groups, filled = sampling.select_groups(values, G, target, self.spec.sampling_cap_policy)
        if filled:
            warn_at_caller(f"dynamic sampling: round cap {self.spec.max_sampling_rounds} reached, "
                           f"{filled} of {target} groups are zero-variance fill-ins")
        keep = sampling.rows_of_groups(groups, G)
        merged = sampling.take_rows(sampling.concat_batches(pool, self.processing_class.pad_token_id), keep)
        start = self.accelerator.process_index * n_local
        local = {k: v[start:start + n_local] for k, v in merged.items()}
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        local["num_items_in_batch"] = loss_mask.sum()   # the whole final batch, all processes
        local["advantages"] = torch.zeros(n_local, device=merged["completion_mask"].device)
        kept = set(keep.tolist())
        m = self._metrics["train"]
        m["sampling/rounds"].append(float(round_no))
        m["sampling/kept_fraction"].append(target / (len(rows) // G))
        m["sampling/filled_groups"].append(float(filled))
        m["sampling/discarded_tokens"].append(float(sum(r.length for i, r in enumerate(rows) if i not in kept)))
        all_rewards = torch.cat(rewards)
        return SampledBatch(local, all_rewards[keep.to(all_rewards.device)], [rows[i] for i in keep.tolist()],
                            Generated(all_rewards, rows, entropy))

    def _gather_rows(self, out: dict) -> dict:
        """Row-aligned tensors of every process, padded to a common width, in rank order."""
        fields = {k: v for k, v in out.items() if k not in sampling.RECOMPUTED}
        if self.accelerator.num_processes == 1:
            return fields
        gathered = {}
        for key, value in fields.items():
            left = key in sampling.LEFT_PADDED
            pad = self.processing_class.pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            value = self.accelerator.pad_across_processes(value, dim=1, pad_index=pad, pad_first=left)
            gathered[key] = self.accelerator.gather(value)
        return gathered

    def _fresh_inputs(self, n_rows: int) -> list[dict]:
        """n_rows / G fresh prompts from the training set, each repeated G times (``self.prompt_draws``)."""
        picks = self.prompt_draws.draw(n_rows // self.num_generations, len(self.train_dataset))
        return [dict(self.train_dataset[int(i)]) for i in picks for _ in range(self.num_generations)]

    def _filter_zero_variance(self, out: dict, rewards_k: torch.Tensor, rows: list[RolloutRow]) -> None:
        """No refill: groups whose accuracy (or reward) does not vary leave the loss and the normaliser."""
        G, n_local = self.num_generations, out["completion_ids"].size(0)
        values = self._keep_values(rewards_k, rows)
        informative = (sampling.group_spread(values, G) > sampling.ZERO_VARIANCE_TOL).repeat_interleave(G)
        start = self.accelerator.process_index * n_local
        keep = informative[start:start + n_local].to(out["completion_mask"].device)
        out["completion_mask"] = out["completion_mask"] * keep.unsqueeze(1).to(out["completion_mask"].dtype)
        local_items = (out["completion_mask"] * out.get("tool_mask", 1)).sum()
        out["num_items_in_batch"] = self._gather(local_items.unsqueeze(0)).sum()
        self._metrics["train"]["sampling/kept_fraction"].append(informative.float().mean().item())

    def _gfpo(self, out: dict, rewards: torch.Tensor, start: int) -> sampling.GfpoFiltered:
        """GFPO's group filter (``sampling.gfpo_filter``); its curves."""
        kept = sampling.gfpo_filter(out, rewards, self.spec, self.num_generations, start, self._gather)
        self._metrics["train"]["sampling/kept_fraction"].append(kept.kept_fraction)
        self._metrics["train"]["gfpo/length_gap"].append(kept.length_gap)
        return kept
