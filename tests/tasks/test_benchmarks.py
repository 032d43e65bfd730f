"""Named benchmarks: the scores against hand computations and brute force, their config, and a
toy run that logs two of them."""

import itertools
import json
import math

import pytest
from mlflow.tracking import MlflowClient

from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.studies.objectives import check_metric, metric_range, objective_value
from grpolab.world.benchmark_scores import benchmark_scores, majority_answer, pass_at_k, reported_ks


def test_pass_at_k_by_hand():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=10, c=3, k=4: 1 - C(7,4)/C(10,4) = 1 - 35/210
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    # stable where the binomials are astronomically large: C(1000, 500) overflows a float
    assert pass_at_k(1000, 1, 500) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)


def test_pass_at_k_equals_brute_force_over_every_k_subset():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_reported_ks_are_powers_of_two_and_n():
    assert reported_ks(8) == [1, 2, 4, 8]
    assert reported_ks(12) == [1, 2, 4, 8, 12]
    assert reported_ks(1) == [1] and reported_ks(32) == [1, 2, 4, 8, 16, 32]


def test_majority_vote_ties_and_missing_answers():
    assert majority_answer(["3", "5", "3", None]) == 0
    assert majority_answer(["5", "3", "3", "5"]) == 0      # tie: the answer seen first wins
    assert majority_answer(["3", "5", "5", "3"]) == 0
    assert majority_answer([None, "", "7", "8"]) == 2       # no answer does not vote
    assert majority_answer([None, None]) is None


def test_benchmark_scores_by_hand():
    hits = [[True, False, True, False],      # majority "3" (2 votes), correct
            [False, True, False, True],      # tie "5" / "3": "5" first, wrong
            [False, False, False, False]]    # no answer at all: wrong
    answers = [["3", "5", "3", None], ["5", "3", "5", "3"], [None, None, None, None]]
    scores = benchmark_scores(hits, answers, [2, 4])
    assert scores["avg_at_4"] == pytest.approx(4 / 12)
    assert scores["pass_at_1"] == pytest.approx(4 / 12)
    # pass@2 per prompt: 1 - C(2,2)/C(4,2) = 5/6 for c = 2, 0 for c = 0
    assert scores["pass_at_2"] == pytest.approx((5 / 6 + 5 / 6 + 0) / 3)
    assert scores["pass_at_4"] == pytest.approx(2 / 3)
    assert scores["maj_at_4"] == pytest.approx(1 / 3)
    # per-sample accuracy over prompts: 1/3, 1/3, 1/3, 1/3 -> sd 0
    assert scores["sd_at_4"] == 0.0 and scores["mean_length"] == 3.0
    spread = benchmark_scores([[True, False], [True, False]], [["1", "2"], ["1", "2"]])
    assert spread["sd_at_2"] == pytest.approx(math.sqrt(0.5))   # accuracies 1 and 0: sd sqrt(((.5)^2 * 2) / 1)
    assert set(spread) == {"avg_at_2", "pass_at_1", "pass_at_2", "maj_at_2", "sd_at_2"}


def _cfg(benchmarks, warm=False, **eval_keys):
    return build_config({"name": "bench", "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                         "warm_start": {"enabled": warm},
                         "train": {"steps": 2, "group_size": 8 if warm else 4, "prompts_per_rollout": 2,
                                   "n_train_prompts": 64},
                         "eval": {"every": 0, "prompts": 4, "k": 1, "final_prompts": 8, **eval_keys,
                                  "benchmarks": benchmarks}})


def test_benchmark_config_is_checked_and_written_out():
    cfg = _cfg([{"name": "small", "size": 4, "n": 8}])
    assert cfg.eval.benchmarks == [{"name": "small", "source": "held_out", "size": 4, "n": 8, "temperature": 1.0,
                                    "top_p": 1.0, "max_tokens": cfg.eval.max_completion_length, "seed": -1}]
    assert _cfg([]).eval.benchmarks == []
    # a run without benchmarks resolves as runs did before them: their config.json still resumes
    assert "benchmarks" not in _cfg([]).resolved()["eval"] and cfg.resolved()["eval"]["benchmarks"][0]["n"] == 8
    for bad, match in ((["aime"], r"benchmarks\[0\]: expected a mapping"),
                       ([{"name": "a"}, {"name": "a"}], "listed twice"),
                       ([{"name": "a", "samples": 4}], r"benchmarks\[0\]\.samples: unknown key"),
                       ([{"name": "a/b"}], "name"),
                       ([{"name": "a", "n": 0}], r"\.n: samples per prompt must be >= 1"),
                       ([{"name": "a", "top_p": 0}], "top_p"),
                       ([{"name": "a", "source": {"path": "/no/such.jsonl"}}], "no such file")):
        with pytest.raises(ConfigError, match=match):
            _cfg(bad)
    with pytest.raises(ConfigError, match="list of mappings"):
        _cfg({"name": "a"})


def test_study_metric_names_a_benchmark_score_under_its_stored_name():
    check_metric("final:eval/aime24/avg@32")
    check_metric("steps_to:eval/aime24/pass@8>=0.5")
    with pytest.raises(ConfigError, match="named benchmark"):
        check_metric("final:eval/aime24/best@32")
    evals = {0: {"eval/aime24/avg_at_32": 0.1}, 10: {"eval/aime24/avg_at_32": 0.3}}
    assert objective_value("final:eval/aime24/avg@32", evals, {}) == 0.3
    assert metric_range("final:eval/aime24/maj@32") == (0.0, 1.0)
    assert metric_range("final:eval/aime24/sd@32") == (0.0, math.inf)


def test_benchmark_overlapping_train_prompts_is_refused(tmp_path):
    from grpolab.experiment.benchmark_runs import RunBenchmarks
    from grpolab.experiment.runner import run_splits
    from grpolab.tasks import make_task
    cfg = _cfg([])
    task = make_task("addition", digits=2)
    train, held_out = run_splits(cfg, task)
    rows = tmp_path / "bench.jsonl"
    rows.write_text("".join(json.dumps({"prompt": e.prompt, "answer": e.answer}) + "\n"
                            for e in [*train[:3], *held_out[:2]]))
    with pytest.raises(ConfigError, match="3 of its 5 prompts are training prompts"):   # toy prompts need no tokenizer
        RunBenchmarks.for_run(cfg, task, train, None, [{"name": "leaky", "source": str(rows)}])
    clean = RunBenchmarks.for_run(cfg, task, train, None, [{"name": "held", "size": 8}])
    assert [len(examples) for _, examples in clean.items] == [8]
    assert [e.prompt for e in clean.items[0][1]] == [e.prompt for e in held_out]   # the run's held-out draw


@pytest.fixture(scope="module")
def two_benchmark_run(shared_state):
    """A 2-step toy run with two named benchmarks (n = 8 each), and its config. It starts from the
    session's warm start (the one test_run.py's runs share: same task, preset, group size and cap),
    so its scores sit between 0 and 1 and every equality below compares real numbers."""
    from grpolab.experiment.runner import run_experiment
    cfg = _cfg([{"name": "small", "size": 4, "n": 8}, {"name": "hot", "size": 3, "n": 8, "temperature": 1.5,
                                                       "top_p": 0.9, "seed": 7}], warm=True)
    return cfg, run_experiment(cfg, shared_state)


def _recomputed(rows: list[dict], n: int) -> dict:
    """avg@n, pass@k (1 - C(n-c, k) / C(n, k) per prompt, with math.comb) and maj@n of one
    benchmark's samples at one step, from its completions table."""
    by_prompt = {}
    for r in rows:
        by_prompt.setdefault(r["index"], []).append(r)
    correct = [sum(r["correct"] for r in samples) for samples in by_prompt.values()]
    out = {f"avg_at_{n}": sum(correct) / (n * len(correct))}
    for k in (1, 2, 4, 8):
        out[f"pass_at_{k}"] = sum(1 - math.comb(n - c, k) / math.comb(n, k) for c in correct) / len(correct)
    # the most frequent non-empty extracted answer (ties: the one sampled first); a prompt whose samples
    # have no answer counts as wrong
    voters = [[r for r in samples if r["extracted"]] for samples in by_prompt.values()]
    votes = [max(v, key=lambda r: (sum(o["extracted"] == r["extracted"] for o in v), -r["sample"])) if v else None
             for v in voters]
    out[f"maj_at_{n}"] = sum(bool(v and v["correct"]) for v in votes) / len(votes)
    return out


def test_toy_run_logs_two_named_benchmarks(shared_state, two_benchmark_run):
    from grpolab.tracking.recorder import tracking_uri
    cfg, result = two_benchmark_run
    run = MlflowClient(tracking_uri(shared_state)).get_run(result.run_id)
    for name in ("small", "hot"):
        for score in ("avg_at_8", "pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8", "maj_at_8", "sd_at_8"):
            key = f"eval/{name}/{score}"
            assert key in run.data.metrics and 0 <= run.data.metrics[key] <= 1, key
            assert result.final_eval[key] == pytest.approx(run.data.metrics[key])
        final = result.final_eval
        assert final[f"eval/{name}/avg_at_8"] == pytest.approx(final[f"eval/{name}/pass_at_1"])
        assert final[f"eval/{name}/pass_at_1"] <= final[f"eval/{name}/pass_at_2"] <= final[f"eval/{name}/pass_at_8"]
    assert run.data.params["eval.benchmarks.small.n"] == "8" and run.data.params["eval.benchmarks.hot.top_p"] == "0.9"
    assert "eval/pass_at_1" in run.data.metrics   # the held-out set still logs its keys
    assert sorted(result.evals) == [0, 2] and "eval/hot/maj_at_8" in result.evals[0]
    from grpolab.tracking.completions import EVAL_TABLE, read_table
    table = read_table(shared_state / "runs" / result.run_id / EVAL_TABLE)
    for name, size in (("small", 4), ("hot", 3)):   # every sample of every evaluation, with its benchmark's name
        rows = [r for r in table if r["benchmark"] == name]
        assert sorted({r["step"] for r in rows}) == [0, 2] and len(rows) == 2 * size * 8
        final = [r for r in rows if r["step"] == 2]
        for score, value in _recomputed(final, 8).items():   # the logged scores, recomputed from the samples
            assert result.final_eval[f"eval/{name}/{score}"] == pytest.approx(value), (name, score)
    # real numbers: each benchmark has a prompt answered right at least once, and pass@8 above avg@8
    for name in ("small", "hot"):
        assert 0 < result.final_eval[f"eval/{name}/avg_at_8"] < result.final_eval[f"eval/{name}/pass_at_8"], name


def test_final_evaluation_logs_its_value_on_the_curves_prompts(shared_state, two_benchmark_run):
    """eval.prompts 4 of final_prompts 8, k 1: every final sample is kept, so the value on the
    curve's prompts is the mean correctness of the first 4 held-out rows at the final step."""
    from grpolab.tracking.completions import EVAL_TABLE, HELD_OUT, read_table
    from grpolab.tracking.held_out import CURVE_SET_KEY
    from grpolab.tracking.recorder import tracking_uri
    cfg, result = two_benchmark_run
    table = read_table(shared_state / "runs" / result.run_id / EVAL_TABLE)
    final = [r for r in table if r["benchmark"] == HELD_OUT and r["step"] == 2]
    assert len(final) == cfg.eval.final_prompts == 8 and cfg.eval.prompts == 4
    assert result.final_eval[CURVE_SET_KEY] == pytest.approx(sum(r["correct"] for r in final[:4]) / 4)
    assert result.final_eval["eval/pass_at_1"] == pytest.approx(sum(r["correct"] for r in final) / 8)
    assert CURVE_SET_KEY not in result.evals[0]   # the curve's own evaluations score those prompts already
    history = MlflowClient(tracking_uri(shared_state)).get_metric_history(result.run_id, CURVE_SET_KEY)
    assert [(m.step, m.value) for m in history] == [(2, pytest.approx(result.final_eval[CURVE_SET_KEY]))]


def test_study_metric_must_name_a_declared_benchmark_and_a_reported_score(tmp_path):
    import yaml
    from conftest import tiny_two_rung_ladder
    from grpolab.studies.definition import load_study
    data = tiny_two_rung_ladder(metric="final:eval/small/avg@8")
    data["base"]["eval"]["benchmarks"] = [{"name": "small", "size": 4, "n": 8}]
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_study(path).objectives[0].metric == "final:eval/small/avg_at_8"   # one name: as MLflow stores it
    for metric, match in (("final:eval/big/avg@8", "no benchmark 'big' in base.eval.benchmarks; declared: small"),
                          ("final:eval/small/pass@3", r"\(n = 8\) reports avg_at_8, maj_at_8, sd_at_8, mean_length, "
                                                      "pass_at_1, pass_at_2, pass_at_4, pass_at_8")):
        path.write_text(yaml.safe_dump({**data, "metric": metric}))
        with pytest.raises(ConfigError, match=match):
            load_study(path)


def test_grpolab_eval_rescores_a_saved_model_as_a_direct_evaluation(shared_state, two_benchmark_run, tmp_path, capsys):
    from grpolab.cli import main
    from grpolab.experiment.benchmark_runs import transformers_sampler
    from grpolab.experiment.runner import run_splits
    from grpolab.tasks import make_task
    from grpolab.tasks.benchmarks import Benchmark, score_benchmark
    from grpolab.tracking.recorder import tracking_uri
    from grpolab.world.models import load_model
    cfg, result = two_benchmark_run
    assert main(["--state", str(shared_state), "eval", result.run_id, "--benchmark", "small", "--n", "16"]) == 0
    client = MlflowClient(tracking_uri(shared_state))
    parent = client.get_run(result.run_id)
    nested = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result.run_id}'")
    assert len(nested) == 1 and nested[0].data.tags["grpolab.eval.step"] == "2"
    rescored = nested[0].data.metrics
    assert {f"eval/small/pass_at_{k}" for k in (1, 2, 4, 8, 16)} | {"eval/small/maj_at_16"} <= set(rescored)
    assert nested[0].data.params["benchmarks.small.n"] == "16"
    # the same model, seed and settings scored directly
    task = make_task("addition", digits=2)
    model, tokenizer = load_model(shared_state / "runs" / result.run_id / "final")
    examples = task.splits(cfg.seed, 0, 4)[1]
    bench = Benchmark("small", size=4, n=16, max_tokens=cfg.eval.max_completion_length)
    direct, _ = score_benchmark(bench, task, examples, transformers_sampler(model, tokenizer), cfg.seed)
    assert {k: rescored[k] for k in direct} == direct and 0 < direct["eval/small/avg_at_16"] < 1
    other, _ = score_benchmark(bench, task, examples, transformers_sampler(model, tokenizer), cfg.seed + 1)
    assert other != direct   # the seed matters, so the equality above says the same seed was used
    # every complete checkpoint and the final model: one nested run each, at its step
    from grpolab.analysis.rescore import rescore
    from grpolab.experiment.checkpoint_files import complete_checkpoints
    folder = shared_state / "runs" / result.run_id
    curve = rescore(str(folder), shared_state, ["hot"], {"size": 2}, "all", echo=lambda line: None)
    assert [r.step for r in curve] == sorted({s for s, _ in complete_checkpoints(folder)} | {2})
    assert all(r.nested_run_id and set(r.metrics) >= {"eval/hot/avg_at_8", "eval/hot/maj_at_8"} for r in curve)
    # a benchmark holding training prompts is refused, naming the overlap
    train, _ = run_splits(cfg, task)
    leaky = tmp_path / "leaky.jsonl"
    leaky.write_text("".join(json.dumps({"prompt": e.prompt, "answer": e.answer}) + "\n" for e in train[:2]))
    assert main(["--state", str(shared_state), "eval", result.run_id, "--benchmark", str(leaky)]) == 2
    assert "benchmark 'leaky': 2 of its 2 prompts are training prompts" in capsys.readouterr().err
    assert main(["--state", str(shared_state), "eval", result.run_id, "--benchmark", "aime"]) == 2
    assert "'aime' is not a benchmark of the run (declared: small, hot)" in capsys.readouterr().err


def test_study_plan_counts_the_named_benchmarks_eval_tokens(tmp_path):
    import yaml
    from conftest import tiny_two_rung_ladder
    from grpolab.studies.plan import plan_study
    data = tiny_two_rung_ladder(budget={"train.steps": 4, "eval.every": 2})
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(data))
    plain = plan_study(str(path)).rows[0]
    data["base"]["eval"]["benchmarks"] = [{"name": "small", "size": 4, "n": 8, "max_tokens": 5},
                                          {"name": "all", "n": 2}]   # size 0: eval.prompts (4) held-out prompts
    path.write_text(yaml.safe_dump(data))
    row = plan_study(str(path)).rows[0]
    # 3 evals (start, step 2, end) x (4 x 8 x 5 + 4 x 2 x the eval cap)
    assert row.evals == 3 and row.eval_tokens - plain.eval_tokens == 3 * (4 * 8 * 5 + 4 * 2 * row.eval_completion_tokens)


def test_majority_vote_clusters_answers_by_the_graders_equivalence():
    from grpolab.tasks.answers import math_equal
    answers = ["\\frac{1}{2}", "7", "1/2", "7", "0.5"]
    assert majority_answer(answers) == 1                       # raw strings: "7" has 2 votes, each half 1
    assert majority_answer(answers, math_equal) == 0           # 1/2 = 0.5 = \frac{1}{2}: 3 votes
    # tie (2 and 2 after clustering): the cluster whose first answer comes first
    assert majority_answer(["3", "1/2", "3", "0.5"], math_equal) == 0
    assert majority_answer(["1/2", "3", "0.5", "3"], math_equal) == 0
    hits = [[True, False, True, False, True]]                  # the halves are right, 7 is wrong
    assert benchmark_scores(hits, [answers])["maj_at_5"] == 0.0
    assert benchmark_scores(hits, [answers], equivalent=math_equal)["maj_at_5"] == 1.0
    assert "maj_at_5" not in benchmark_scores(hits, None)      # no answers: no majority vote reported


def test_answer_equivalence_is_the_tasks_string_grader():
    from types import SimpleNamespace
    from grpolab.tasks.answers import make_grader
    from grpolab.tasks.benchmarks import answer_equivalence
    numeric = make_grader("numeric")
    assert answer_equivalence(SimpleNamespace(grader=numeric, grade_kind="numeric")) is numeric
    assert answer_equivalence(SimpleNamespace(grader=None, grade_kind="task")) is None   # a reference-only scorer
    from grpolab.tasks import make_task
    assert answer_equivalence(make_task("addition", digits=2)) is None                   # toy: string equality


def test_every_answer_row_must_hold_n_answers():
    with pytest.raises(ValueError, match=r"answers\[1\] holds 3 answers, expected n = 4"):
        benchmark_scores([[True] * 4, [False] * 4], [["1"] * 4, ["1"] * 3])
    with pytest.raises(ValueError, match=r"hits\[1\] holds 2 samples, hits\[0\] holds 4"):
        benchmark_scores([[True] * 4, [False] * 2], [["1"] * 4, ["1"] * 2])
    with pytest.raises(ValueError, match="answers holds 1 prompts, hits 2"):
        benchmark_scores([[True] * 4, [False] * 4], [["1"] * 4])


def test_overlap_check_ignores_whitespace_and_case():
    from grpolab.tasks.benchmarks import Benchmark, check_overlap
    from grpolab.world.task import Example
    examples = [Example("What is  the SUM of 2 and 3?\n", "5", {}), Example("Name a prime.", "2", {}),
                Example("rendered <prompt>", "4", {"question": " what is 2+2? "})]
    with pytest.raises(ConfigError, match="2 of its 3 prompts are training prompts"):
        check_overlap(Benchmark("b"), examples, {"what is the sum of 2 and 3?", "What is\t2+2?"})
    check_overlap(Benchmark("b"), examples, {"what is the sum of 2 and 4?"})   # a different question passes


def test_file_benchmark_names_drop_every_data_suffix_and_are_metric_key_parts():
    from grpolab.analysis.rescore import file_benchmark_name
    from grpolab.tasks.benchmarks import parse_benchmark
    assert file_benchmark_name("aime.2024.jsonl") == "aime.2024"
    assert file_benchmark_name("/data/aime.2024.jsonl.gz") == "aime.2024"
    assert file_benchmark_name("HuggingFaceH4/MATH-500") == "MATH-500"
    assert file_benchmark_name("my set (v2).csv") == "my_set__v2_"
    assert file_benchmark_name(".jsonl") == "file"
    for source in ("aime.2024.jsonl", "my set (v2).csv", "_x.json"):   # every name passes the config's check
        assert parse_benchmark({"name": file_benchmark_name(source)}, "b").name == file_benchmark_name(source)


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_benchmark_sampling_is_seeded_per_request(mode, tiny_model_dir, monkeypatch):
    """Against the vLLM test double (tests/vllm_double.py), not vLLM: the engine's own generator
    advances with every request, so only a per-request seed makes a benchmark repeatable."""
    from types import SimpleNamespace
    import vllm_double
    from grpolab.experiment.benchmark_runs import engine_sampler
    from grpolab.experiment.vllm_eval import VllmEvalSampler
    from grpolab.tasks import make_task
    from grpolab.tasks.benchmarks import Benchmark, score_benchmark
    from grpolab.trainer.vllm_engine import vllm_completions
    from grpolab.world.models import load_model
    vllm_double.install(monkeypatch, str(tiny_model_dir))
    _, tokenizer = load_model(tiny_model_dir)
    engine = SimpleNamespace(
        mode=mode, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0, min_p=None, generation_kwargs={},
        structured_outputs_regex=None, enable_sleep_mode=False,
        llm=vllm_double.LLM(str(tiny_model_dir)) if mode == "colocate" else None,
        vllm_client=vllm_double.VLLMClient() if mode == "server" else None)
    trainer = SimpleNamespace(vllm_generation=engine, temperature=1.0)
    trainer.vllm_completions = lambda *a, **k: vllm_completions(engine, *a, **k)
    draw = engine_sampler(VllmEvalSampler(trainer, tokenizer))
    task = make_task("addition", digits=2)
    examples = task.splits(0, 0, 3)[1]
    bench = Benchmark("b", n=4, top_p=0.9, max_tokens=6)

    def completions(seed):
        return [r["completion"] for r in score_benchmark(bench, task, examples, draw, seed, batch_completions=8)[1]]
    first, again, other = completions(5), completions(5), completions(6)
    assert first == again and first != other
    calls = [c for c in vllm_double.ENGINE_LOG if c["kind"] == "generate"]
    assert all(c["top_p"] == 0.9 for c in calls)                     # the benchmark's top_p, per request
    # 2 prompts per call (8 // n): colocate seeds each prompt seed + index * n, server one seed per call
    seeds = [c["seed"] for c in calls[:len(calls) // 3]]
    assert seeds == ([5, 9, 13] if mode == "colocate" else [5, 13])


def test_vllm_backed_benchmarks_take_their_own_top_p_but_the_trainers_temperature(monkeypatch):
    from grpolab.experiment import engines
    monkeypatch.setattr(engines, "vllm_installed", lambda: True)
    vllm = {"generation": {"backend": "vllm"}}

    def cfg(bench):
        return build_config({"name": "b", "task": {"name": "addition", "digits": 2}, "model": {"preset": "tiny"},
                             "train": {"temperature": 0.9}, "eval": {"benchmarks": [bench]}, **vllm})
    assert cfg({"name": "a", "temperature": 0.9, "top_p": 0.8, "seed": 3}).eval.benchmarks[0]["top_p"] == 0.8
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.temperature: .* trainer's temperature 0\.9"):
        cfg({"name": "a", "temperature": 1.0})
