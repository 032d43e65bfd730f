"""Supervised warm start to the edge of competence, cached on disk.

GRPO only learns from groups whose rewards differ, so a random-init model (pass@G = 0) gives
no signal. The warm start trains a preset with teacher forcing on task targets and stops as
soon as held-out pass@1 lies inside ``band`` and pass@G > 0, measured at ``max_completion_length``
(the cap the RL run evaluates with; 0: the task's own) so that a run starts inside the band at the
length it actually trains and is judged at. If one interval jumps over the
band, training restarts from the last checkpoint below it with half the learning rate and
checks twice as often. The result is cached under a key that hashes everything that
determines it; a second request with the same key loads the cache instead of retraining.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from grpolab.errors import ConfigError
from grpolab.signals import raise_if_signalled
from grpolab.world.generation import EvalOptions, evaluate
from grpolab.world.models import PRESETS, build_model, save_model
from grpolab.world.task import Task

log = logging.getLogger(__name__)
WARMSTART_VERSION = 1  # bump when the procedure changes: it is part of the cache key
DONE_MARKER = "warmstart.json"


@dataclass(frozen=True)
class WarmStartConfig:
    band: tuple[float, float] = (0.2, 0.6)
    group_size: int = 8           # pass@G must be > 0 for this G
    learning_rate: float = 3e-3
    batch_size: int = 64
    max_steps: int = 4000
    check_every: int = 50
    eval_prompts: int = 64
    n_train: int = 4000
    max_completion_length: int = 0   # cap the band is checked at (the run's eval cap); 0: the task's own
    held_out_seed: int = -1          # >= 0: the runs' fixed benchmark is the first held_out_prompts of this
    held_out_prompts: int = 0        # seed's eval stream; SFT never sees them and the band is checked on the
                                     # eval_prompts drawn after them (the benchmark picks nothing here)


def check_cap(task: Task, cfg: WarmStartConfig) -> int:
    """The completion cap the band is checked at: ``cfg.max_completion_length`` or the task's."""
    if cfg.max_completion_length < 0:
        raise ConfigError(f"warm start max_completion_length: must be >= 0 (0 = the task's own), "
                          f"got {cfg.max_completion_length}")
    return cfg.max_completion_length or task.max_completion_length


def cache_key(preset: str, task: Task, seed: int, cfg: WarmStartConfig) -> str:
    """Hash of everything that determines the warm-started model. The band's cap enters as the
    effective cap, and only when it differs from the task's own: a warm start checked at the task
    cap (all caches made before the cap was configurable) keeps its key, one checked at another
    cap gets a new one, so a cache checked at 44 tokens is never reused for a run at 24."""
    config = asdict(cfg)
    config.pop("max_completion_length")
    if cfg.held_out_seed < 0:   # no benchmark to keep out: the key of every warm start made without one
        config.pop("held_out_seed")
        config.pop("held_out_prompts")
    cap = check_cap(task, cfg)
    payload = {
        "version": WARMSTART_VERSION, "preset": preset, "arch": PRESETS[preset], "task": task.name,
        "task_params": task.params, "seed": seed, "config": config,
        "torch": torch.__version__, "transformers": transformers.__version__,
    }
    if cap != task.max_completion_length:
        payload["band_cap"] = cap
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def warm_start(preset: str, task: Task, seed: int, cfg: WarmStartConfig, cache_dir: Path) -> tuple[Path, dict]:
    """Return (model directory, warm-start record); trains only on a cache miss."""
    target = Path(cache_dir) / f"{preset}-{task.name}-{cache_key(preset, task, seed, cfg)}"
    marker = target / DONE_MARKER
    target.parent.mkdir(parents=True, exist_ok=True)
    # Study workers may ask for the same warm start at once: one trains, the others wait and load.
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            record = json.loads(marker.read_text())
            record["cache_hit"] = True
            return target, record
        model, tokenizer = build_model(preset, seed)
        record = _train_to_band(model, tokenizer, task, seed, cfg)
        save_model(model, tokenizer, target)
        marker.write_text(json.dumps(record, indent=2))  # written last: its presence means complete
    record["cache_hit"] = False
    return target, record


def _batches(task: Task, tokenizer, examples, batch_size: int, rng: random.Random):
    """Endless teacher-forcing batches: loss only on target tokens and the closing EOS."""
    while True:
        chunk = rng.sample(examples, min(batch_size, len(examples)))
        rows = []
        for ex in chunk:
            p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
            t = tokenizer(task.target(ex, rng), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            rows.append((p + t, [-100] * len(p) + t))
        width = max(len(r[0]) for r in rows)
        # built on the CPU; the training loop moves each batch to the model's device
        ids = torch.full((len(rows), width), tokenizer.pad_token_id, device="cpu")
        labels = torch.full((len(rows), width), -100, device="cpu")
        attn = torch.zeros((len(rows), width), dtype=torch.long, device="cpu")
        for i, (x, y) in enumerate(rows):
            ids[i, :len(x)], labels[i, :len(y)] = torch.tensor(x, device="cpu"), torch.tensor(y, device="cpu")
            attn[i, :len(x)] = 1
        yield ids, attn, labels


def sft_splits(task: Task, seed: int, cfg: WarmStartConfig):
    """(SFT examples, band-check prompts), both disjoint from the runs' benchmark when there is one."""
    if cfg.held_out_seed < 0:
        return task.splits(seed, cfg.n_train, cfg.eval_prompts)
    train, held = task.splits(seed, cfg.n_train, cfg.held_out_prompts + cfg.eval_prompts, held_out_seed=cfg.held_out_seed)
    return train, held[cfg.held_out_prompts:]


def _train_to_band(model, tokenizer, task: Task, seed: int, cfg: WarmStartConfig) -> dict:
    low, high = cfg.band
    if not 0.0 <= low < high <= 1.0:
        raise ConfigError(f"warm_start.band: need 0 <= low < high <= 1, got {list(cfg.band)}")
    cap = check_cap(task, cfg)
    train, held_out = sft_splits(task, seed, cfg)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    lr, every = cfg.learning_rate, cfg.check_every
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    batches = _batches(task, tokenizer, train, cfg.batch_size, rng)
    below = (copy.deepcopy(model.state_dict()), 0)   # last checkpoint whose pass@1 was under the band
    step, history = 0, []
    model.train()
    while step < cfg.max_steps:
        raise_if_signalled()   # one deferred inside a store call of this row: minutes of SFT would follow
        for _ in range(every):
            ids, attn, labels = (t.to(model.device) for t in next(batches))
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        result = evaluate(model, tokenizer, task, held_out, EvalOptions(cfg.group_size, max_new_tokens=cap))
        history.append({"step": step, "loss": round(loss.item(), 4), "pass@1": result.pass_at_1, f"pass@{cfg.group_size}": result.pass_at_k})
        log.info("warm start step %d loss %.3f pass@1 %.3f", step, loss.item(), result.pass_at_1)
        if low <= result.pass_at_1 <= high and result.pass_at_k > 0:
            return {"steps": step, "pass@1": result.pass_at_1, f"pass@{cfg.group_size}": result.pass_at_k,
                    "band": list(cfg.band), "max_completion_length": cap, "history": history}
        if result.pass_at_1 > high:  # overshot: back up, smaller steps, look more often
            model.load_state_dict(below[0])
            step, lr, every = below[1], lr / 2, max(every // 2, 5)
            opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        else:
            below = (copy.deepcopy(model.state_dict()), step)
    raise ConfigError(
        f"warm_start: {task.name} did not reach pass@1 in {list(cfg.band)} within warm_start.max_steps="
        f"{cfg.max_steps} at {cap} completion tokens (last pass@1 {history[-1]['pass@1']:.3f}); raise max_steps, "
        f"widen the band, raise the completion cap or ease the task"
    )
