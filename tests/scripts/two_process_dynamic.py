"""Run by tests under torch.distributed.run with 2 CPU processes (gloo): trains 2 steps with a
method (DAPO dynamic sampling by default) and writes each rank's decisions and advantage token
statistics to a JSON file."""

import json
import sys

import datasets
from trl import GRPOConfig

from grpolab.method.registry import get_method
from grpolab.trainer.dropin import task_correctness
from grpolab.trainer.grpo_trainer import GrpoLabTrainer
from grpolab.world.models import load_model
from grpolab.world.generated import make_task

model_dir, out_path = sys.argv[1], sys.argv[2]
method = sys.argv[3] if len(sys.argv) > 3 else "dapo"
task = make_task("addition", digits=2)
train, _ = task.splits(0, 256, 8)
ds = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})


def reward(prompts, completions, idx, **kw):
    # even prompts: rewards alternate inside the group (informative); odd prompts: constant
    return [float(j % 2) if i % 2 == 0 else 1.0 for j, i in enumerate(idx)]


args = GRPOConfig(output_dir=out_path + ".out", report_to="none", max_steps=2, per_device_train_batch_size=8,
                  num_generations=4, max_completion_length=5, use_cpu=True, disable_tqdm=True, save_strategy="no",
                  seed=0, top_k=0, logging_steps=1)
_, tok = load_model(model_dir)
if method == "dapo":
    spec = get_method("dapo").spec({"soft_overlong": False, "overlong_filter": False, "max_sampling_rounds": 6,
                                    "sampling_filter": "reward"})
else:
    spec = get_method(method).spec()
trainer = GrpoLabTrainer(model=model_dir, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=tok,
                         method=spec, correctness=task_correctness(task, train))
decisions = []
original = trainer._dynamic_sampling


def record(inputs):
    batch = original(inputs)
    local, rewards, rows = batch.local, batch.rewards, batch.rows
    decisions.append({"prompts": [r.prompt for r in rows], "local_rows": int(local["completion_ids"].size(0)),
                      "num_items": int(local["num_items_in_batch"]), "rank": trainer.accelerator.process_index,
                      "world": trainer.accelerator.num_processes,
                      "spread_min": float((rewards.view(-1, 4).max(1).values - rewards.view(-1, 4).min(1).values).min())})
    return batch


generate = trainer._generate_and_score_completions
token_stats = []


def record_advantages(inputs):
    out = generate(inputs)
    if trainer.model.training:
        adv, mask = out["advantages"], out["completion_mask"].float()
        adv = adv.unsqueeze(1).expand_as(mask) if adv.dim() == 1 else adv
        token_stats.append([float((adv * mask).sum()), float((adv * adv * mask).sum()), float(mask.sum())])
    return out


trainer._dynamic_sampling = record
trainer._generate_and_score_completions = record_advantages
trainer.train()
decisions = {"sampling": decisions, "token_stats": token_stats, "world": trainer.accelerator.num_processes}
with open(f"{out_path}.rank{trainer.accelerator.process_index}.json", "w") as f:
    json.dump(decisions, f)
