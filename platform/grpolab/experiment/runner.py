"""One run: validated RunConfig -> warm-started model -> GrpoLabTrainer -> MLflow run."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from grpolab import __version__
from grpolab.errors import ConfigError
from grpolab.experiment import checkpoint_files, checkpoints, engines, param_change, vllm_eval
from grpolab.experiment.benchmark_runs import RunBenchmarks
from grpolab.experiment.config import RunConfig
from grpolab.experiment.run_identity import RunIdentity
from grpolab.experiment.starting_model import resolve_model_once
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.requirements import inert_settings
from grpolab.signals import raise_if_signalled, signals_raise
from grpolab.startup import freeze_training_stack
from grpolab.state import state_dir as default_state_dir
from grpolab.tasks import eval_sample_rows, hub_sources, render_examples, task_of
from grpolab.tracking.completions import HELD_OUT, accelerator_tags, open_tables
from grpolab.tracking.held_out import CURVE_SET_KEY, HELD_OUT_METRICS, EvalSteps
from grpolab.tracking.naming import method_tags, run_params, state_relative
from grpolab.tracking.recorder import RunLink, RunRecorder, git_commit, stored_name
from grpolab.trainer.dropin import MethodSettingsWarning, task_correctness
from grpolab.trainer.estimator_inputs import needs_whole_groups
from grpolab.world.generation import EvalOptions, evaluate
from grpolab.world.models import load_model

log = logging.getLogger(__name__)


@dataclass
class RunResult(EvalSteps):
    run_id: str | None
    status: str
    evals: dict            # step -> held-out metrics (step 0 = the warm start)
    train_curves: dict     # metric -> [(step, value)] per logged step
    steps: int
    wall_seconds: float
    warm_start: dict


class TrackingCallback(TrainerCallback):
    """Forwards each log window to the recorder and runs the periodic held-out evaluation."""

    def __init__(self, recorder, evaluate_fn, every: int, samples_keep: int):
        self.recorder, self.evaluate_fn, self.every = recorder, evaluate_fn, every
        self.trainer = None
        self.samples: list[dict] = []
        self.samples_keep = samples_keep
        self.table = None   # the run's completions table, written as the run goes (rank 0; tracking/completions.py)
        self.tracking_seconds = 0.0   # time spent handing curves to MLflow (buffering + batched writes)
        self.curves: dict[str, list[tuple[int, float]]] = {}   # metric -> (step, value)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "train_runtime" in logs:  # TRL's end-of-train summary: not a step (no curve, no samples)
            return
        start = time.perf_counter()
        if self.recorder is not None and logs:
            self.recorder.log_metrics(logs, step=state.global_step)
        self.tracking_seconds += time.perf_counter() - start
        for key, value in (logs or {}).items():   # the points as stored: a resumed run reads them back
            name = stored_name(key)
            if name and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.curves.setdefault(name, []).append((state.global_step, float(value)))
        if self.trainer is not None and self.samples_keep:
            kept = self.trainer.last_rollout[: self.samples_keep]
            self.samples.extend({"step": state.global_step, **row} for row in kept)
            if self.table is not None:
                self.table.append(kept, step=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        raise_if_signalled()   # a step's end is a safe point: a Ctrl-C a finaliser swallowed stops the run here
        if self.every and state.global_step % self.every == 0 and state.global_step < state.max_steps:
            self.evaluate_fn(state.global_step)


def _rank() -> int:
    """This process's rank under torch.distributed / accelerate launchers (0 when alone)."""
    return int(os.environ.get("RANK", "0"))


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _eval_metrics(result) -> dict:
    """The held-out keys of an evaluation; the final one's pass@1 on the curve's prompts beside them."""
    curve = getattr(result, "curve_pass_at_1", math.nan)   # multi-turn episodes: none
    curve = {CURVE_SET_KEY: curve} if math.isfinite(curve) else {}
    return {**{key: getattr(result, field) for key, field in HELD_OUT_METRICS.items()}, **curve}


def run_splits(cfg: RunConfig, task) -> tuple[list, list]:
    """(train prompts, held-out set) of a run: the held-out set is eval.final_prompts long (the
    evaluations before the last use its first eval.prompts); eval.seed >= 0 draws it from that seed
    for every run (one benchmark), and the train stream of the run seed leaves its prompts out."""
    fixed = {"held_out_seed": cfg.eval.seed} if cfg.eval.seed >= 0 else {}
    return task.splits(cfg.seed, cfg.train.n_train_prompts, cfg.eval.final_prompt_count, **fixed)


def _grpo_args(cfg: RunConfig, task, output_dir: Path):
    from trl import GRPOConfig
    t = cfg.train
    world = _world()
    if (t.prompts_per_rollout * t.group_size) % (t.minibatches * t.grad_accum * world):
        raise ConfigError(f"train: prompts_per_rollout x group_size must split evenly into minibatches x grad_accum x "
                          f"{world} processes")
    micro = t.prompts_per_rollout * t.group_size // (t.minibatches * t.grad_accum * world)   # the same global batch
    entry = ADVANTAGES[cfg.spec.advantage]
    if needs_whole_groups(entry.name) and t.prompts_per_rollout % world:
        raise ConfigError(f"train.prompts_per_rollout ({t.prompts_per_rollout}): method.advantage={entry.name} needs "
                          f"whole groups on each process, so a multiple of the {world} processes")
    # Defaults grpolab chooses but does not own (a constant schedule, no warm-up, no top-k cut):
    # train.trl replaces them; the fields grpolab owns are refused at parse time (trl_passthrough.py).
    overridable = {"lr_scheduler_type": "constant", "warmup_steps": 0, "top_k": 0, "disable_tqdm": True,
                   "log_completions": False}
    return GRPOConfig(
        # one log window per rollout: rollout curves (entropy, length, groups) and loss-side curves
        # (clip, kl) are averaged over the same optimizer steps and land on the same step
        output_dir=str(output_dir), report_to=list(cfg.tracking.report_to) or "none", logging_steps=t.rollout_steps,
        save_strategy="steps" if checkpoints.save_interval(t) else "no", save_steps=checkpoints.save_interval(t) or 500,
        max_steps=t.steps, per_device_train_batch_size=micro, gradient_accumulation_steps=t.grad_accum,
        steps_per_generation=t.minibatches * t.grad_accum, num_iterations=t.num_iterations,
        num_generations=t.group_size, max_completion_length=t.max_completion_length or task.max_completion_length,
        temperature=t.temperature, learning_rate=t.learning_rate,
        max_grad_norm=t.max_grad_norm, seed=cfg.seed, data_seed=cfg.seed,
        # loss_type, beta, clip bounds, scale_rewards, mask_truncated_completions, ...: GrpoLabTrainer
        # sets what the method decides (dropin.apply_method_settings).
        use_cpu=not engines.trains_on_cuda(), remove_unused_columns=False, **engines.grpo_kwargs(cfg),
        **{**overridable, **t.trl},
    )


def _reward_funcs(task, examples, max_len: int):
    """The task's named reward components (DAPO's soft overlong is added by GrpoLabTrainer)."""
    def component(name):
        def fn(prompts, completions, idx, **kwargs):
            return [task.score(examples[i], c)[name] for i, c in zip(idx, completions)]
        fn.__name__ = name
        return fn
    # tasks built from parts score each named reward once per completion, with failure accounting
    return task.reward_funcs(examples, max_len) if hasattr(task, "reward_funcs") else [
        component(n) for n in task.reward_names]


def _run_tags(cfg: RunConfig, task) -> dict:
    """What a run is (method, spec hash, task, seed) and what built it (commit, library versions)."""
    import mlflow
    import transformers
    import trl

    return {**method_tags(cfg.method_name, cfg.spec, cfg.seed),
            "grpolab.task": task.name, "grpolab.git_commit": git_commit(),
            "grpolab.version": __version__, "grpolab.overrides": "advantage,loss",
            "versions.torch": torch.__version__, "versions.trl": trl.__version__,
            "versions.transformers": transformers.__version__, "versions.mlflow": mlflow.__version__}


@dataclass
class _Run:
    """What the phases of one run share."""
    cfg: RunConfig
    state: Path
    task: object
    recorder: RunRecorder | None
    out_dir: Path
    resume_from: Path | None
    resume_step: int | None
    eval_hook: object = None
    started: float = field(default_factory=time.perf_counter)
    evals: dict = field(default_factory=dict)
    model: object = None
    tokenizer: object = None
    held_out: list = field(default_factory=list)
    eval_sampler: object = None   # generation.backend=vllm: the trainer's vLLM engine (vllm_eval.py)
    tables: tuple = (None, None)  # (rollouts, evaluations) completions tables, rank 0 (tracking/completions.py)
    device_seconds: float = 0.0   # processes x wall seconds of training (a resumed run's earlier part included)
    benchmarks: RunBenchmarks = None   # eval.benchmarks, scored beside the held-out set
    start_weights: param_change.ParamChange | None = None   # theta_0, rank 0, with eval.param_change, unless sharded
    curves: dict = field(default_factory=dict)   # the run's training curves (TrackingCallback.curves)

    def evaluate(self, step: int, final: bool = False) -> None:
        """Held-out evaluation at ``step``: once per run, on rank 0, logged and handed to the hook.
        The final one scores the whole held-out set with eval.final_k samples (avg@k); the ones
        before it its first eval.prompts prompts with eval.k."""
        raise_if_signalled()   # a safe point too: no evaluation (nor final save) after a swallowed Ctrl-C
        if self.eval_sampler is not None:
            self.eval_sampler.sync()   # every process: the weight push may gather sharded parameters
        if _rank() != 0:
            return   # the other processes wait at the next collective
        cfg = self.cfg
        examples = self.held_out if final else self.held_out[:cfg.eval.prompts]
        k = (cfg.eval.final_k or cfg.eval.k) if final else cfg.eval.k
        options = EvalOptions(k, cfg.train.temperature, max_new_tokens=cfg.eval.max_completion_length,
                              salvage=cfg.eval.salvage,
                              # a final set larger than the curve's also scores the curve's prompts apart: the
                              # one point comparable with an earlier evaluation (where equal, pass@1 is it)
                              curve_prompts=cfg.eval.prompts if final and len(examples) > cfg.eval.prompts else 0)
        result = evaluate(self.model, self.tokenizer, self.task, examples, options, sampler=self.eval_sampler)
        named, named_rows = self.benchmarks.evaluate(self.task, self.model, self.tokenizer, self.eval_sampler)
        self.evals[step] = {**_eval_metrics(result), **named}
        self._log_param_change(step)
        rows = eval_sample_rows(self.task, result.samples, examples, step)
        self.tables[1].append(rows, step=step, benchmark=HELD_OUT)
        self.tables[1].append(named_rows, step=step)   # every sample of the named benchmarks, each row names its own
        if self.recorder:
            self.recorder.log_metrics(self.evals[step], step=step)
            if result.truncated:   # a curve beside length/truncated_fraction, not a held-out key
                self.recorder.log_metrics({"length/truncated_salvageable": result.salvage_rate}, step=step)
            if rows:
                self.recorder.log_table(rows, "eval_samples.json")   # MLflow table, appended
        if self.eval_hook is not None:
            self.eval_hook(step, self.evals[step])  # e.g. Optuna's report / prune

    def _log_param_change(self, step: int) -> None:
        """policy/param_change at this evaluation: a training curve (it is no held-out score)."""
        moved = self.start_weights.of(self.model) if self.start_weights is not None else math.nan
        if math.isfinite(moved):
            self.curves.setdefault(param_change.KEY, []).append((step, moved))
            if self.recorder:
                self.recorder.log_metrics({param_change.KEY: moved}, step=step)


def run_experiment(cfg: RunConfig, state: Path | None = None, identity: RunIdentity = RunIdentity(),
                   callbacks: list | None = None, on_trainer=None, eval_hook=None, on_run=None) -> RunResult:
    """Train one experiment end to end and record it; returns its result (raises on failure,
    after the MLflow run has been ended FAILED or KILLED). ``identity``: the MLflow run it records
    into; its ``resume_run_id`` continues that run from its newest complete checkpoint (checkpoints.py).

    Phases: load the training stack, open the run, prepare the model and data, build the trainer,
    train, finish."""
    _load_training_stack()
    raise_if_signalled()   # one deferred inside a store call before this row: it never opens a run
    run = _open_run(cfg, Path(state or default_state_dir()), identity)
    run.eval_hook = eval_hook
    if run.recorder and on_run is not None:
        on_run(run.recorder.run_id)
    with (run.recorder or contextlib.nullcontext()), signals_raise():
        _tag_settings(run, identity.resume_run_id is not None)
        dataset, train, ws_record, model_dir = _prepare(run)
        trainer, callback = _build_trainer(run, dataset, train, callbacks)
        if on_trainer is not None:
            on_trainer(trainer)
        _train(run, trainer, callback)
        _finish(run, trainer, callback, ws_record, model_dir)
    return RunResult(run.recorder.run_id if run.recorder else None, "FINISHED", run.evals, callback.curves,
                     trainer.state.global_step, time.perf_counter() - run.started, ws_record)


def _load_training_stack() -> None:
    """TRL's trainer and all it imports, loaded before the run makes any object of its own, then frozen
    where the command line owns the process (startup.freeze_training_stack): nothing of a row (its
    model, data, MLflow run) is frozen with the stack, so a process that runs several rows frees each."""
    import grpolab.trainer.grpo_trainer  # noqa: F401
    freeze_training_stack()


def _open_run(cfg: RunConfig, state: Path, identity: RunIdentity) -> _Run:
    """The task, the MLflow run (rank 0 only: several processes log one run) and the run folder."""
    task = task_of(cfg.task)
    resume_run_id = identity.resume_run_id
    recorder = None
    resume_from = checkpoint_files.check_resume(state, resume_run_id, cfg.resolved()) if resume_run_id else None
    resume_step = checkpoint_files.checkpoint_step(resume_from) if resume_from else None  # (rotation may delete it later)
    if resume_from is not None and _rank() == 0:   # a study row's worker log says it too
        log.info("run %s: %s", resume_run_id, checkpoint_files.resume_note(resume_from))
    if cfg.tracking.enabled and _rank() == 0:
        recorder = RunRecorder(state, cfg.tracking.experiment, identity.run_name or f"{cfg.name}-s{cfg.seed}",
                               {**_run_tags(cfg, task), **(identity.extra_tags or {})}, run_params(cfg),
                               cfg.tracking.flush_every, RunLink(identity.parent_run_id, resume_run_id))
    out_dir = checkpoint_files.run_dir(state, checkpoints.shared_run_folder(recorder.run_id if recorder else None))
    if resume_from is None and _rank() == 0:
        checkpoint_files.write_config(out_dir, cfg.resolved())
    run = _Run(cfg, state, task, recorder, out_dir, resume_from, resume_step)
    if _rank() == 0:
        run.tables = open_tables(out_dir, recorder, keep_upto=resume_step)
    return run


def _tag_settings(run: _Run, resumed: bool) -> None:
    recorder, cfg = run.recorder, run.cfg
    if not recorder:
        return
    if cfg.warnings:
        recorder.set_tags({"grpolab.warnings": " | ".join(cfg.warnings)})
    recorder.set_tags({"grpolab.inert": ",".join(inert_settings(cfg)) or "none"})
    if cfg.tracking.system_metrics:
        recorder.start_system_metrics(resumed=resumed)


def _prepare(run: _Run):
    """The (warm-started) model and tokenizer, the train and held-out prompts, the train dataset."""
    import datasets
    cfg = run.cfg
    model_dir, ws_record = resolve_model_once(cfg, run.task, run.state)
    run.model, run.tokenizer = load_model(model_dir)
    raise_if_signalled()   # loading can swallow a SIGTERM (a finaliser); stop before tokenising and building the trainer
    engines.check_model(run.model.config, cfg, str(model_dir))
    train, held_out = run_splits(cfg, run.task)
    run.benchmarks = RunBenchmarks.for_run(cfg, run.task, train, run.tokenizer)
    if run.recorder:   # what hub ids resolved to: each snapshot's commit (hub.py)
        pinned = {f"grpolab.hub.{key}": ref for key, ref in hub_sources(run.task).items()}
        if ws_record.get("source") == "hub":
            pinned["grpolab.hub.model"] = f"{ws_record['repo_id']}@{ws_record['commit']}"
        if pinned:
            run.recorder.set_tags(pinned)
        _log_datasets(run, train, held_out)
    train, run.held_out = render_examples(run.task, train, run.tokenizer), render_examples(run.task, held_out, run.tokenizer)
    dataset = datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})
    return dataset, train, ws_record, model_dir


def _log_datasets(run: _Run, train, held_out) -> None:
    """The train prompts and the held-out set as the run's MLflow dataset inputs (as generated or
    read, before the chat template), named by task and split, sourced by the task's settings."""
    task = run.cfg.task
    source = {"grpolab.task": task["name"], "seed": run.cfg.seed,
              **{f"task.{k}": v for k, v in task.items() if k != "name" and not isinstance(v, (dict, list))}}
    for context, split, part in (("training", "train", train), ("evaluation", "held-out", held_out)):
        rows = [{"prompt": e.prompt, "answer": str(getattr(e, "answer", ""))} for e in part]
        run.recorder.log_dataset(f"{task['name']}-{split}", rows, context, source)


def _build_trainer(run: _Run, dataset, train, callbacks):
    """GrpoLabTrainer through its public drop-in signature, with the task as one more correctness source."""
    from grpolab.trainer.grpo_trainer import GrpoLabTrainer
    cfg, task = run.cfg, run.task
    max_len = cfg.train.max_completion_length or task.max_completion_length
    callback = TrackingCallback(run.recorder, run.evaluate, cfg.eval.every, cfg.tracking.samples)
    saver = checkpoints.CheckpointCallback(cfg.train.keep_checkpoints, run.recorder)
    with warnings.catch_warnings():   # its GRPOConfig leaves what the method decides at the defaults on purpose
        warnings.simplefilter("ignore", MethodSettingsWarning)
        trainer = GrpoLabTrainer(
            model=run.model, reward_funcs=_reward_funcs(task, train, max_len),
            args=_grpo_args(cfg, task, run.out_dir), train_dataset=dataset, peft_config=engines.peft_config(cfg.model.lora),
            processing_class=run.tokenizer, callbacks=[callback, saver, *(callbacks or [])], method=cfg.spec,
            correctness=task_correctness(task, train), max_empty_updates=cfg.train.max_empty_updates,
            **({"rollout_func": task.rollout(train)} if hasattr(task, "rollout") else {}),   # multi-turn envs (envs/)
        )
    if cfg.spec.needs_reference and trainer.ref_model is None and cfg.model.lora is None:  # LoRA: adapter off
        raise RuntimeError("the method needs a reference model but TRL did not build one")
    callback.trainer = saver.trainer = trainer
    callback.table, trainer.rollout_rows_kept = run.tables[0], cfg.tracking.samples   # rows built per rollout: those kept
    unmeasured = param_change.not_measured(cfg.eval.param_change, trainer)
    if unmeasured:
        if run.recorder:
            run.recorder.set_tags({param_change.TAG: unmeasured})
    elif _rank() == 0:   # theta_0 before any step or checkpoint load (the trainer loads one in train())
        run.start_weights = param_change.ParamChange(run.model)
    run.eval_sampler = vllm_eval.eval_sampler(cfg, trainer, run.tokenizer)
    trainer.remove_callback(PrinterCallback)  # it prints every raw log dict; grpolab prints a summary
    return trainer, callback


def _train(run: _Run, trainer, callback) -> None:
    """Evaluate at step 0 (or restore a resumed run's curves and state), train, evaluate at the end."""
    started = time.perf_counter()
    if run.resume_from is not None:  # the curves so far come from the store; grpolab's own trainer state from the checkpoint
        checkpoints.load_extra_state(trainer, run.resume_from)
        if run.recorder:
            run.evals, callback.curves = checkpoints.resume_history(run.recorder, run.resume_step)
    run.curves = callback.curves   # the evaluations add policy/param_change to them
    if run.resume_from is None:
        run.evaluate(0)
    before = trainer.counters.device_seconds   # a resumed run's, from its checkpoint
    if checkpoints.restores_without_training(trainer, run.resume_step, run.cfg.train.steps):
        checkpoints.restore_finished(trainer, run.resume_from)
    else:
        trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
    run.evaluate(trainer.state.global_step, final=True)
    run.device_seconds = before + (time.perf_counter() - started) * _world()


def _finish(run: _Run, trainer, callback, ws_record, model_dir) -> None:
    """Save the final model; record the warm start, config, samples, figure and path tags."""
    final_dir = checkpoints.save_final(trainer, run.out_dir)
    recorder, cfg, state = run.recorder, run.cfg, run.state
    if not recorder:
        return
    recorder.log_json({"warm_start": ws_record, "model_dir": str(model_dir)}, "warm_start.json")
    recorder.log_json(cfg.resolved(), "config.json")
    recorder.log_table(callback.samples, "samples.json")
    if cfg.tracking.log_model:   # the weights (a LoRA run: the adapter) and tokenizer, as save_final wrote them
        recorder.log_folder(final_dir, "model")
    if cfg.tracking.figures:
        recorder.log_curves_figure(callback.curves, run.evals, state)
    # what the processes trained on (a gloo fallback trains on the CPU of a GPU machine)
    recorder.set_tags(accelerator_tags(run.device_seconds, trainer.accelerator.device.type == "cuda", _world()))
    recorder.set_tags({"grpolab.wall_seconds": round(time.perf_counter() - run.started, 1),
                       "grpolab.final_model": state_relative(final_dir, state),   # moves with the state folder
                       "grpolab.run_dir": state_relative(run.out_dir, state)})
    if run.resume_from is not None:
        recorder.set_tags({"grpolab.resume.from_step": run.resume_step,
                           "grpolab.resume.skipped_points": recorder.skipped_points,
                           "grpolab.resume.differing_points": recorder.differing_points})
