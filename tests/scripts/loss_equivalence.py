"""Run under torch.distributed.run with 1 or 2 CPU processes (gloo): one fixed global batch of 8
rows (no generation, so both runs see the same data), split across the processes; two micro-steps
through GrpoLabTrainer.compute_loss + backward on the DDP-wrapped model. Rank 0 writes the loss
(averaged over processes, as TRL reports it), the gradient norm and the logged loss-side stats."""

import json
import sys
from pathlib import Path

import torch
from trl import GRPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import tiny_dataset  # noqa: E402
from grpolab.method.spec import build_spec
from grpolab.trainer.dropin import task_correctness
from grpolab.trainer.grpo_trainer import GrpoLabTrainer
from grpolab.world.models import load_model

model_dir, out_path = sys.argv[1], sys.argv[2]
task, train, ds = tiny_dataset(64)
spec = build_spec({"surrogate": "dual_clip", "eps_low": 0.1, "eps_high": 0.1, "dual_clip_c": 1.5,
                   "aggregation": "token_mean", "top_entropy_quantile": 0.5, "entropy_mode": "adaptive",
                   "entropy_coef": 0.01, "entropy_coef_step": 0.001, "entropy_target": 99.0})
_, tok = load_model(model_dir)
probe = GRPOConfig(output_dir=out_path + ".out", report_to="none", use_cpu=True)
world = probe.world_size
args = GRPOConfig(output_dir=out_path + ".out", report_to="none", max_steps=2, per_device_train_batch_size=8 // world,
                  num_generations=4, max_completion_length=6, use_cpu=True, disable_tqdm=True, seed=0, top_k=0,
                  logging_steps=1)
trainer = GrpoLabTrainer(model=model_dir, reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(prompts)],
                         args=args, train_dataset=ds, processing_class=tok, method=spec,
                         correctness=task_correctness(task, train))
acc = trainer.accelerator
trainer.model.train()
trainer.current_gradient_accumulation_steps = 1   # set by Trainer.train(); this script drives the steps itself
model = acc.prepare_model(trainer.model)
opt = torch.optim.SGD(model.parameters(), lr=0.5)

g = torch.Generator().manual_seed(0)
N, P, T = 8, 4, 6
batch = {"prompt_ids": torch.randint(3, 20, (N, P), generator=g), "prompt_mask": torch.ones(N, P, dtype=torch.long),
         "completion_ids": torch.randint(3, 20, (N, T), generator=g)}
lengths = torch.tensor([6, 5, 4, 3, 6, 2, 5, 1])
batch["completion_mask"] = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.3, -0.3])
with torch.no_grad():   # old log-probs away from the current ones, so that every clip region is visited
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, T)
    batch["old_per_token_logps"] = logp + 0.6 * torch.randn(N, T, generator=g)
batch["num_items_in_batch"] = batch["completion_mask"].sum()
rank, n_local = acc.process_index, N // world
local = {k: (v[rank * n_local:(rank + 1) * n_local] if torch.is_tensor(v) and v.dim() else v) for k, v in batch.items()}

record = {"world": world, "loss": [], "grad_norm": []}
for step in range(2):
    opt.zero_grad()
    loss = trainer.compute_loss(model, local)
    acc.backward(loss)
    record["loss"].append(acc.reduce(loss.detach(), reduction="mean").item())
    record["grad_norm"].append(float(acc.clip_grad_norm_(model.parameters(), 1e9)))
    opt.step()
    trainer._step += 1
record["stats"] = {k: list(v) for k, v in trainer._metrics["train"].items()}
if rank == 0:
    with open(out_path, "w") as f:
        json.dump(record, f)
