"""Precision, memory and generation engines: LoRA (only the adapter trains, the reference is the
adapter switched off), gradient checkpointing (same numbers, recomputed activations), TRL's vLLM
settings passed through, the vLLM importance-sampling weight applied in grpolab's loss, and every
bad setting refused at config time with the key named."""

import pytest
import torch
from safetensors.torch import load_file

from grpolab import algorithms
from grpolab.experiment import engines
from conftest import trainable_report
from grpolab.cli import main
from grpolab.experiment.config import build_config
from grpolab.errors import ConfigError
from grpolab.experiment.runner import run_experiment
from grpolab.method.spec import build_spec


def two_steps(name, method=None, **extra):
    """Two steps from the session's shared warm start (a random model gets no reward: nothing would move)."""
    data = {"name": name, "method": method or {"base": "grpo"}, "task": {"name": "addition", "digits": 2},
            "model": {"preset": "tiny"},
            "train": {"steps": 2, "group_size": 8, "prompts_per_rollout": 4, "learning_rate": 0.01, "save_every": 0},
            "eval": {"every": 0, "prompts": 4, "k": 2}, "tracking": {"flush_every": 1}}
    for key, value in extra.items():
        section, _, field = key.partition("__")
        data.setdefault(section, {})[field] = value
    return build_config(data)


def test_lora_trains_only_the_adapter_and_uses_the_base_as_reference(shared_state):
    seen = {}
    cfg = two_steps("lora", method={"base": "grpo", "kl_coef": 0.1},
                    model__lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    result = run_experiment(cfg, shared_state, on_trainer=lambda t: seen.update(
        trainer=t, before={n: p.detach().clone() for n, p in t.model.named_parameters()}))
    trainer = seen["trainer"]
    trainable, total, names = trainable_report(trainer.model)
    assert names and all("lora_" in n for n in names)                  # only adapter tensors train
    assert 0 < trainable < total / 10
    after = dict(trainer.model.named_parameters())
    changed = {n for n, before in seen["before"].items() if not torch.equal(before, after[n].detach())}
    assert changed and changed <= set(names)                           # the frozen base is untouched
    assert any("lora_B" in n for n in changed)
    assert trainer.ref_model is None          # TRL's way: the reference is the model with the adapter disabled
    assert result.train_curves["kl"][0][1] == pytest.approx(0.0, abs=1e-7)   # lora_B = 0: policy == reference
    assert result.train_curves["kl"][-1][1] > 0
    final = load_file(shared_state / "runs" / result.run_id / "final" / "adapter_model.safetensors")
    assert final and all("lora_" in k for k in final)      # the final model of a LoRA run is its adapter


def test_gradient_checkpointing_recomputes_but_changes_no_number(shared_state):
    flags = {}
    tmp_path = shared_state
    plain = run_experiment(two_steps("gc-off"), tmp_path, on_trainer=lambda t: flags.update(
        start={n: p.detach().cpu().clone() for n, p in t.model.state_dict().items()}))   # beside the saved (CPU) weights
    ckpt = run_experiment(two_steps("gc-on", train__gradient_checkpointing=True), tmp_path,
                          on_trainer=lambda t: flags.update(trainer=t))
    assert flags["trainer"].model.is_gradient_checkpointing     # switched on by the Trainer when training starts
    a = load_file(tmp_path / "runs" / plain.run_id / "final" / "model.safetensors")
    b = load_file(tmp_path / "runs" / ckpt.run_id / "final" / "model.safetensors")
    assert any(not torch.equal(a[k], flags["start"][k]) for k in a)        # training moved the weights ...
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key      # ... identically with recomputed activations
    assert plain.train_curves["loss"] == pytest.approx(ckpt.train_curves["loss"], abs=1e-6)


def _launcher_env(monkeypatch, devices, **env):
    """``devices`` faked CUDA devices, and only ``env`` of the launchers' rank variables set."""
    for name in (*engines.LOCAL_SIZE_VARS, *engines.LOCAL_RANK_VARS):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)


@pytest.mark.parametrize("ranks,devices,cuda", [(1, 0, False), (1, 1, True), (2, 1, False), (2, 2, True)])
def test_ranks_train_on_cuda_only_with_a_device_each(monkeypatch, ranks, devices, cuda):
    """NCCL cannot put two ranks on one GPU: more ranks on the node than visible devices train on the CPU (gloo)."""
    _launcher_env(monkeypatch, devices)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    if ranks > devices > 0:
        seen = f"{ranks} ranks on this node \\(LOCAL_WORLD_SIZE\\) but {devices} visible CUDA device"
        with pytest.warns(UserWarning, match=seen):
            assert engines.trains_on_cuda() is cuda
    else:
        assert engines.trains_on_cuda() is cuda


def _falls_back_then_trains_on_cuda(monkeypatch, variable, cpu_case, cuda_case, message):
    """``cpu_case`` / ``cuda_case``: (visible devices, the variable's value)."""
    _launcher_env(monkeypatch, cpu_case[0], **{variable: cpu_case[1]})
    with pytest.warns(UserWarning, match=message):
        assert engines.trains_on_cuda() is False
    _launcher_env(monkeypatch, cuda_case[0], **{variable: cuda_case[1]})
    assert engines.trains_on_cuda() is True


@pytest.mark.parametrize("variable", ["SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_SIZE",
                                      "WORLD_SIZE"])
def test_ranks_of_srun_and_mpirun_count_without_local_world_size(monkeypatch, variable):
    """srun / mpirun set no LOCAL_WORLD_SIZE: their own count of the node's ranks is read instead."""
    _falls_back_then_trains_on_cuda(monkeypatch, variable, (2, "4"), (4, "4"),
                                    f"4 ranks on this node \\({variable}\\) but 2 visible CUDA device")


@pytest.mark.parametrize("variable", ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"])
def test_a_local_rank_past_the_visible_devices_trains_on_the_cpu(monkeypatch, variable):
    _falls_back_then_trains_on_cuda(monkeypatch, variable, (2, "2"), (2, "1"),
                                    f"local rank 2 \\({variable}\\) but 2 visible CUDA device")


def test_cpu_fallback_refuses_fp16_bf16_without_cpu_support_and_vllm_colocate(monkeypatch):
    """CUDA is visible but this rank trains on the CPU (two ranks, one GPU): fp16 and vLLM colocate
    are refused at config time, and bf16 is judged by the CPU, not by the GPU it will not use."""
    _launcher_env(monkeypatch, 1, LOCAL_WORLD_SIZE="2")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with pytest.warns(UserWarning, match="2 ranks on this node"):
        with pytest.raises(ConfigError, match="train.dtype: fp16 mixed precision needs a CUDA GPU and this process "
                                              "trains on the CPU"):
            two_steps("fp16", train__dtype="fp16")
        with pytest.raises(ConfigError, match="train.dtype: bf16 needs hardware support"):
            two_steps("bf16", train__dtype="bf16")
        monkeypatch.setattr(engines, "vllm_installed", lambda: True)
        monkeypatch.setattr(engines, "real_vllm_installed", lambda: True)
        with pytest.raises(ConfigError, match="generation.mode: vLLM colocate generates on the training GPU"):
            two_steps("colocate", train__dtype="fp32", generation__backend="vllm", generation__mode="colocate")
        two_steps("server", train__dtype="fp32", generation__backend="vllm", generation__mode="server")
    _launcher_env(monkeypatch, 1, LOCAL_WORLD_SIZE="1")
    assert two_steps("fp16-gpu", train__dtype="fp16").train.dtype == "fp16"
    assert two_steps("bf16-gpu", train__dtype="bf16").train.dtype == "bf16"
    two_steps("colocate-gpu", train__dtype="fp32", generation__backend="vllm", generation__mode="colocate")


def test_vllm_settings_pass_through_to_trl(monkeypatch):
    from trl import GRPOConfig
    monkeypatch.setattr(engines, "vllm_installed", lambda: True)
    cfg = two_steps("vllm", generation__backend="vllm", generation__mode="server",
                    generation__server_base_url="http://10.0.0.2:8000", generation__is_correction="token_truncate",
                    generation__is_max=2.0, generation__is_min=0.5, generation__gpu_memory_utilization=0.5)
    kwargs = engines.grpo_kwargs(cfg)
    assert kwargs["use_vllm"] and kwargs["vllm_mode"] == "server"
    assert kwargs["vllm_importance_sampling_mode"] == "token_truncate"
    assert (kwargs["vllm_importance_sampling_clip_max"], kwargs["vllm_importance_sampling_clip_min"]) == (2.0, 0.5)
    args = GRPOConfig(output_dir="unused", report_to="none", use_cpu=True, **kwargs)   # every name is TRL's
    assert args.vllm_server_base_url == "http://10.0.0.2:8000" and args.vllm_importance_sampling_correction
    off = engines.grpo_kwargs(two_steps("vllm-off", generation__backend="vllm", generation__is_correction="none"))
    assert off["vllm_importance_sampling_correction"] is False
    plain = engines.grpo_kwargs(two_steps("plain", train__dtype="fp32"))
    assert "use_vllm" not in plain and plain["bf16"] is False and plain["fp16"] is False


def test_sampling_weights_multiply_every_token_term():
    """Hand check: token_mean aggregation of w * surrogate, w from TRL's vLLM correction."""
    spec = build_spec({"advantage": "group_mean", "aggregation": "token_mean", "surrogate": "clip"})
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv = torch.tensor([2.0])
    w = torch.tensor([[0.5, 3.0, 1.0]])
    plain, _ = algorithms.policy_loss(spec, algorithms.LossInputs(logp, logp.detach(), adv, mask))
    weighted, _ = algorithms.policy_loss(spec, algorithms.LossInputs(logp, logp.detach(), adv, mask, sampling_weights=w))
    # on-policy ratio 1: per-token surrogate = -A = -2 on the two valid tokens
    assert plain.item() == pytest.approx(-2.0)
    assert weighted.item() == pytest.approx((-2.0 * 0.5 - 2.0 * 3.0) / 2)
    seq_w = torch.tensor([[0.0]])             # sequence_mask: a masked sequence contributes nothing
    masked, _ = algorithms.policy_loss(spec, algorithms.LossInputs(logp, logp.detach(), adv, mask, sampling_weights=seq_w))
    assert masked.item() == 0.0


@pytest.mark.parametrize("extra, key", [
    ({"model__lora": {"r": 4, "target_modules": ["c_attn"]}}, "model.lora.target_modules"),
    ({"model__lora": {"r": 4, "alpha": 8}}, "model.lora.target_modules"),
    ({"model__lora": {"rank": 4, "target_modules": ["q_proj"]}}, "model.lora.rank"),
    ({"model__lora": {"r": 0, "target_modules": ["q_proj"]}}, "model.lora"),
    ({"train__dtype": "fp8"}, "train.dtype"),
    ({"train__dtype": "fp16"}, "train.dtype"),           # mixed fp16 needs a CUDA GPU
    ({"generation__backend": "vllm"}, "generation.backend"),   # vLLM is not installed here
    ({"generation__backend": "sglang"}, "generation.backend"),
    ({"generation__mode": "remote"}, "generation.mode"),
    ({"generation__is_correction": "clip"}, "generation.is_correction"),
    ({"generation__is_max": 0.5, "generation__is_min": 0.8}, "generation"),
], ids=lambda v: str(v)[:40])
def test_bad_engine_settings_are_refused_at_config_time(extra, key):
    if torch.cuda.is_available() and extra.get("train__dtype") == "fp16":
        pytest.skip("fp16 is valid on a GPU")
    with pytest.raises(ConfigError) as err:
        two_steps("bad", **extra)
    assert str(err.value).startswith(key)


def test_bf16_without_hardware_support_exits_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(engines, "bf16_supported", lambda: False)   # a CPU without AVX512-BF16 / AMX
    exp = tmp_path / "e.yaml"
    exp.write_text("method: grpo\ntrain: {dtype: bf16}\n")
    assert main(["--state", str(tmp_path / "state"), "run", str(exp)]) == 2
    err = capsys.readouterr().err
    assert "train.dtype" in err and "bf16" in err
    assert not (tmp_path / "state" / "mlflow.db").exists()    # refused before any run was recorded


def test_lora_on_a_model_without_the_target_modules_exits_2(tmp_path, capsys):
    exp = tmp_path / "e.yaml"
    exp.write_text("method: grpo\nmodel: {preset: tiny, lora: {r: 4, alpha: 8, target_modules: [c_attn, c_proj]}}\n")
    assert main(["--state", str(tmp_path / "state"), "run", str(exp)]) == 2
    err = capsys.readouterr().err
    assert "model.lora.target_modules" in err and "c_attn" in err and "q_proj" in err   # names what exists


def test_fp32_head_needs_untied_embeddings(tmp_path):
    from grpolab.world.models import build_model, save_model
    model, tok = build_model("tiny", 0)
    model.config.tie_word_embeddings = True
    save_model(model, tok, tmp_path / "tied")
    from grpolab.experiment.engines import bf16_supported
    # without bf16 hardware the dtype is refused first (this CPU may lack AVX512-BF16/AMX): also before any step
    expected = "^train.cast_lm_head_to_fp32" if bf16_supported() else "^train.dtype: bf16 needs hardware support"
    with pytest.raises(ConfigError, match=expected):
        two_steps("tied", model__preset=None, model__path=str(tmp_path / "tied"), train__cast_lm_head_to_fp32=True, train__dtype="bf16")
    with pytest.warns(UserWarning, match="cast_lm_head_to_fp32 has no effect"):
        two_steps("fp32-head", train__cast_lm_head_to_fp32=True)


def test_sampling_weights_leave_the_kl_term_unweighted():
    """TRL 1.16 (and verl) multiply the policy term by the vLLM importance weight and add beta * KL after:
    the KL is never weighted. Hand check on one token-mean batch with an in-loss k3 KL."""
    spec = build_spec({"advantage": "group_mean", "aggregation": "token_mean", "surrogate": "clip", "kl_coef": 0.5,
                       "kl_estimator": "k3", "kl_placement": "loss", "kl_ratio_correction": False})
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w = torch.tensor([[0.5, 3.0, 1.0]])
    loss, _ = algorithms.policy_loss(spec, algorithms.LossInputs(logp, logp.detach(), torch.tensor([2.0]), mask, ref_logp=ref,
                                     sampling_weights=w))
    k3 = torch.exp(ref - logp.detach()) - (ref - logp.detach()) - 1
    expected = ((-2.0 * w[0, :2]) + 0.5 * k3[0, :2]).sum() / 2
    assert loss.item() == pytest.approx(expected.item())
