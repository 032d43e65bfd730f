"""Checkpoints and resume, the trainer's side: one folder per MLflow run, kept complete, continued
in place. What the folders hold and whether a run can resume from them is ``checkpoint_files.py``
(torch-free). Detail: docs/runs.md, "grpolab.experiment.checkpoints".
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import torch
from transformers import TrainerCallback

from grpolab.errors import ConfigError
from grpolab.experiment.checkpoint_files import COMPLETE, complete_checkpoints
from grpolab.experiment.engines import trains_on_cuda
from grpolab.tracking.recorder import stored_points
from grpolab.trainer.grpolab_state import from_flat_layout

EXTRA_STATE = "grpolab_state{rank}.pt"      # one per process (the dynamic-sampling RNG is rank-seeded)
AUTO_SAVE_EVERY = 50           # train.save_every = -1: about this many steps, rounded up to a whole rollout


def shared_run_folder(run_id: str | None) -> str:
    """The run folder's name, the same on every process: rank 0's MLflow run id (broadcast when
    several processes run), or a fresh name for an untracked run."""
    name = run_id or f"untracked-{uuid.uuid4().hex[:12]}"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState
        from accelerate.utils import broadcast_object_list
        # joins the process group the launcher describes; on CPU accelerate sees it (gloo) only with
        # cpu=True, else its broadcast is a silent no-op and each rank saves into its own folder
        PartialState(cpu=not trains_on_cuda())   # the device the trainer will pick (gloo or NCCL)
        name = broadcast_object_list([name], from_process=0)[0]
    return name


def save_interval(train) -> int:
    """Optimizer steps between checkpoints (0: only at the end)."""
    if train.save_every >= 0:
        return train.save_every
    per = train.rollout_steps
    return -(-AUTO_SAVE_EVERY // per) * per


# -- grpolab's own trainer state --------------------------------------------------------------
# The file holds {STATE_FORMAT_KEY: STATE_FORMAT, "state": trainer.grpolab_state_dict()}; a file
# without the format key is an older one, trainer attributes by name (grpolab_state.from_flat_layout).
STATE_FORMAT_KEY, STATE_FORMAT = "grpolab_state_format", 2


def _extra_name(trainer) -> str:
    rank = trainer.accelerator.process_index
    return EXTRA_STATE.format(rank=f"_{rank}" if trainer.accelerator.num_processes > 1 else "")


def save_extra_state(trainer, folder: Path) -> None:
    torch.save({STATE_FORMAT_KEY: STATE_FORMAT, "state": trainer.grpolab_state_dict()}, Path(folder) / _extra_name(trainer))


def load_extra_state(trainer, folder: Path) -> None:
    """The trainer continues from its state file in a checkpoint folder, of either layout; ConfigError
    (exit 2) when the file is of neither or does not fit this run's trainer."""
    path = Path(folder) / _extra_name(trainer)
    saved = torch.load(path, weights_only=False)   # our own file; an older one pickles a ValueTracker
    try:
        if not isinstance(saved, dict):
            raise TypeError(f"it holds a {type(saved).__name__}, not a dict")
        if STATE_FORMAT_KEY not in saved:
            saved = {STATE_FORMAT_KEY: STATE_FORMAT, "state": from_flat_layout(saved, trainer.grpolab_state_dict())}
        if saved[STATE_FORMAT_KEY] != STATE_FORMAT:
            raise ValueError(f"format {saved[STATE_FORMAT_KEY]!r}; this grpolab reads format {STATE_FORMAT}")
        trainer.load_grpolab_state_dict(saved["state"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"--resume: grpolab's trainer state {path} cannot be loaded "
                          f"({type(exc).__name__}: {exc}); start a new run instead") from None


def restores_without_training(trainer, resume_step: int | None, steps: int) -> bool:
    """Whether a resumed run is restored by ``restore_finished`` instead of ``trainer.train``: its
    checkpoint is at its last step (killed in the final evaluation, the final save or the report)
    and its weights load outside the training loop (DeepSpeed and FSDP load them into the engine
    the loop prepares, so those runs still go through ``train``)."""
    return (resume_step is not None and resume_step >= steps
            and not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled))


def restore_finished(trainer, ckpt: Path) -> None:
    """Restore a run whose checkpoint is at its last step as a resumed ``trainer.train`` restores
    it (weights, Trainer state with its global step, random states), without training: resumed at
    ``max_steps`` in mid-epoch, transformers' Trainer trains one more step before it checks its
    budget (its stop test follows each step), so the run would end one step past it."""
    from transformers.trainer_callback import TrainerState
    trainer._load_from_checkpoint(str(ckpt))
    trainer.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))
    trainer._load_rng_state(str(ckpt))   # the final evaluation draws from them as right after training


class CheckpointCallback(TrainerCallback):
    """After the Trainer has written checkpoint-<step>: add grpolab's state, store every metric
    point up to this step (a resumed run never re-logs them), mark it complete, and delete
    complete checkpoints beyond the newest ``keep``."""

    def __init__(self, keep: int, recorder=None):
        self.keep, self.recorder = keep, recorder
        self.trainer = None

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        save_extra_state(self.trainer, folder)
        self.trainer.accelerator.wait_for_everyone()   # every process's state is on disk before the marker
        if not state.is_world_process_zero:
            return
        if self.recorder is not None:
            self.recorder.flush(wait=True)
        tmp = folder / (COMPLETE + ".tmp")
        files = {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
                 if p.is_file() and p != tmp}   # what resume checks is still whole (checkpoint_problem)
        tmp.write_text(json.dumps({"step": state.global_step, "files": files}))
        os.replace(tmp, folder / COMPLETE)   # atomic: a kill leaves the checkpoint either complete or ignored
        for _, old in complete_checkpoints(Path(args.output_dir))[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def resume_history(recorder, upto_step: int) -> tuple[dict, dict]:
    """(evals {step: metrics}, curves {key: [(step, value)]}) stored up to the checkpoint step,
    so that a resumed run's result (study objectives: final, auc, tail) covers the whole run.
    Keys are read back exactly as stored: a live run keys its history by the same names
    (``tracking.recorder.stored_name``), so a resumed row and a live one share one name per metric."""
    evals: dict[int, dict] = {}
    curves: dict[str, list[tuple[int, float]]] = {}
    for key, points in stored_points(recorder.client, recorder.run_id).items():
        for step, value in points:
            if step > upto_step:
                continue
            if key.startswith("eval/"):
                evals.setdefault(step, {})[key] = value
            elif not key.startswith("system/"):   # MLflow's own monitor: never a live curve
                curves.setdefault(key, []).append((step, value))
    return evals, curves


def save_final(trainer, folder: Path) -> Path:
    """The final model (the adapter alone for a LoRA run) beside the run's checkpoints."""
    target = Path(folder) / "final"
    trainer.save_model(str(target))
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(str(target))
    return target
