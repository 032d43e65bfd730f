"""The model a run starts from: a pretrained preset or GGUF file, a hub id or folder
(``model.path``), a random init, or a warm start trained (and cached) for the task.

Kept apart from the run's phases (runner.py) because a run's starting model is asked for without
training too: a study exports its base model from it (studies/base_model.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from grpolab.experiment.config import RunConfig
from grpolab.experiment.pretrained import model_directory, resolve_pretrained
from grpolab.world.models import build_model, save_model
from grpolab.world.warmstart import WarmStartConfig, warm_start


def resolve_model(cfg: RunConfig, task, state: Path) -> tuple[Path, dict]:
    """The folder of the model ``cfg`` starts from and a record of where it came from."""
    pretrained = resolve_pretrained(cfg.model.preset, cfg.model.path, state / "models")  # GGUF: converted once
    if pretrained is not None:
        return pretrained
    if cfg.model.path is not None:
        return model_directory(cfg.model.path, cfg.model.revision)   # a hub id: its cached (or fetched) snapshot
    ws = cfg.warm_start
    if not ws.enabled:
        target = state / "models" / f"{cfg.model.preset}-random-{cfg.seed}"
        if not (target / "config.json").exists():
            # written aside, then renamed: a concurrent worker never loads a half-written model
            scratch = target.with_name(f"{target.name}.tmp-{os.getpid()}")
            save_model(*build_model(cfg.model.preset, cfg.seed), scratch)
            try:
                os.rename(scratch, target)
            except OSError:   # another process renamed its identical copy first
                import shutil
                shutil.rmtree(scratch, ignore_errors=True)
        return target, {"source": "random-init"}
    # the band is checked at the cap the run's held-out pass@1 is measured at (eval's, which
    # defaults to the training cap), not the task's own: a start in band at 44 tokens can be
    # far below it at a training cap of 24
    # By default the warm start's seed is the run seed (different seeds, different SFT models);
    # warm_start.seed pins one shared warm start, e.g. to compare methods from the same model.
    return warm_start(cfg.model.preset, task, ws.seed if ws.seed >= 0 else cfg.seed, warm_start_config(cfg),
                      state / "models")


def warm_start_config(cfg: RunConfig) -> WarmStartConfig:
    """The warm start a run asks for; with a fixed benchmark (eval.seed >= 0) its SFT data and band
    check keep out of the benchmark's prompts."""
    ws = cfg.warm_start
    return WarmStartConfig(band=tuple(ws.band), group_size=cfg.train.group_size, learning_rate=ws.learning_rate,
                           max_steps=ws.max_steps, check_every=ws.check_every,
                           max_completion_length=cfg.eval.max_completion_length, held_out_seed=cfg.eval.seed,
                           held_out_prompts=cfg.eval.final_prompt_count if cfg.eval.seed >= 0 else 0)


def resolve_model_once(cfg: RunConfig, task, state: Path) -> tuple[Path, dict]:
    """With several processes rank 0 builds (or finds) the model first and the others then read
    the cache: once torch.distributed is up, transformers writes weights on rank 0 only, so a
    model saved by another rank would be a folder without weights. (Before the process group
    exists every process writes a complete copy aside and the first rename wins.)"""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return resolve_model(cfg, task, state)
    resolved = resolve_model(cfg, task, state) if dist.get_rank() == 0 else None
    dist.barrier()
    return resolved or resolve_model(cfg, task, state)
