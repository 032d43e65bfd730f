"""Tasks built from parts (grpolab.tasks): extraction, math-verify grading, reasoning-gym splits,
prompting, named rewards with user callables and failure accounting, bad input through the CLI.
Real packages (math-verify, reasoning-gym, transformers tokenizers), no mocks."""

import json

import pytest

from conftest import write_sums
from grpolab.errors import ConfigError
from grpolab.tasks import make_task
from grpolab.tasks.answers import make_extractor, make_grader
from grpolab.tasks.rewards import RewardFailedError

USER_REWARDS = '''
import time
CALLS = []

def recording(*, prompt, completion, answer, extracted, meta, completion_length, bonus):
    CALLS.append(dict(prompt=prompt, completion=completion, answer=answer, extracted=extracted, meta=meta,
                      completion_length=completion_length, bonus=bonus))
    return bonus * len(completion)

def picky(completion, answer):          # names only two documented arguments
    return float(completion.strip() == answer)

def flaky(*, completion, **kwargs):     # raises on every completion that ends with an odd digit
    if completion.strip() and completion.strip()[-1] in "13579":
        raise ValueError("odd ending")
    return 1.0

TURN = [0]

def alternating(**kwargs):              # raises on every second call: exactly half of each rollout
    TURN[0] += 1
    if TURN[0] % 2:
        raise ValueError("every other completion")
    return 0.5

def always_raises(**kwargs):
    raise RuntimeError("reward service down")

def slow(**kwargs):
    time.sleep(3)
    return 1.0

def not_a_number(**kwargs):
    return "high"

def wants_unknown(*, completion, temperature_of_mars):
    return 0.0
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(USER_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys
    sys.modules.pop("my_rewards", None)
    return importlib.import_module("my_rewards")


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps({"q": f"What is {i} + {i}?", "a": str(2 * i)}) for i in range(40)))
    return path


@pytest.mark.parametrize("reference, answer, equal", [
    ("1/2", "0.5", True), ("0.5", "\\frac{1}{2}", True), ("\\frac{1}{2}", "1/2", True), ("1/2", "\\frac12", True),
    ("2", "2.0", True), ("1000", "1,000", True), ("x^2 + 2x", "2x + x^2", True), ("\\{1, 2\\}", "\\{2, 1\\}", True),
    ("1/2", "0.51", False), ("3", "-3", False), ("\\sqrt{2}", "1.414", False), ("12", "x", False),
    ("(1, 2)", "(2, 1)", False), ("7", "", False),
])
def test_math_verify_grading_table(reference, answer, equal):
    assert make_grader("math")(reference, answer) is equal


def test_numeric_and_exact_graders():
    numeric = make_grader("numeric", tolerance=0.01)
    assert numeric("3.14159", "3.14") and numeric("1,000", "1000") and numeric("3/4", "0.75")
    assert not numeric("3.14159", "3.2") and not numeric("3", "three")
    exact = make_grader("exact")
    assert exact("Paris", " Paris\n") and not exact("Paris", "paris")
    with pytest.raises(ConfigError, match="task.grade"):
        make_grader("fuzzy")


@pytest.mark.parametrize("kind, completion, expected", [
    ("boxed", "so \\boxed{1} then \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
    ("boxed", "no box here 42", None),
    ("boxed", "unclosed \\boxed{3", None),
    ("hash", "reasoning...\n#### 1,234\n", "1,234"),
    ("hash", "no marker 5", None),
    ("last_number", "3 apples and -1,250.5 pears, then 7/8.", "7/8"),
    ("last_number", "costs 1,250.5 dollars", "1250.5"),
    ("last_number", "no digits", None),
    ("answer_tag", "<answer>4</answer> wait <answer> 5 </answer>", "5"),
    ("none", "  exact text \n", "exact text"),
])
def test_extraction_formats(kind, completion, expected):
    assert make_extractor(kind)(completion) == expected


def test_regex_extraction_and_its_errors():
    extract = make_extractor("regex", r"Answer:\s*(\S+)")
    assert extract("Answer: 3\nAnswer: 4") == "4" and extract("nothing") is None
    assert make_extractor("regex", r"\d+")("a 12 b 34") == "34"   # no group: the whole match
    with pytest.raises(ConfigError, match="task.regex"):
        make_extractor("regex", "([unclosed")
    with pytest.raises(ConfigError, match="task.regex"):
        make_extractor("regex")


def test_reasoning_gym_splits_are_seeded_disjoint_and_self_scored():
    config = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
    task = make_task("reasoning_gym", dataset="basic_arithmetic", config=config, extract="answer_tag")
    train, held = task.splits(3, 300, 40)
    assert len(held) == 40 and 250 < len(train) <= 300
    assert not {e.prompt for e in train} & {e.prompt for e in held}
    again_train, again_held = task.splits(3, 300, 40)
    assert [e.prompt for e in again_held] == [e.prompt for e in held] and [e.prompt for e in again_train] == [e.prompt for e in train]
    assert [e.prompt for e in task.splits(4, 300, 40)[1]] != [e.prompt for e in held]
    for e in held[:10]:   # reasoning-gym's own scorer accepts its own answers and rejects others
        assert task.is_correct(e, f"Work... <answer>{e.answer}</answer>")
        assert not task.is_correct(e, f"<answer>{int(e.answer) + 1}</answer>")
        assert not task.is_correct(e, e.answer)   # right number, wrong format for answer_tag
    gsm = make_task("reasoning_gym", dataset="gsm_symbolic", extract="last_number", grade="math")
    example = gsm.splits(0, 4, 4)[1][0]
    assert gsm.is_correct(example, f"The answer is {example.answer}.")


def test_local_dataset_fields_formats_and_reference_extraction(tmp_path, rows):
    task = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a", eval_fraction=0.25,
                     extract="last_number", grade="numeric")
    train, held = task.splits(0, 1000, 1000)
    assert len(held) == 10 and len(train) == 30 and not {e.prompt for e in train} & {e.prompt for e in held}
    e = train[0]
    assert task.is_correct(e, f"It is {e.answer}.") and not task.is_correct(e, "It is 999.")
    import pandas as pd
    frame = pd.DataFrame({"question": [f"{i}*3?" for i in range(12)], "solution": [f"work #### {3 * i}" for i in range(12)]})
    for name in ("rows.parquet", "rows.csv"):
        path = tmp_path / name
        frame.to_parquet(path) if name.endswith("parquet") else frame.to_csv(path, index=False)
        t = make_task("local_dataset", path=str(path), prompt_field="question", answer_field="solution",
                      reference_extract="hash", extract="boxed", grade="math")
        ex = t.splits(0, 20, 2)[0][0]
        assert ex.answer == str(3 * int(ex.prompt.split("*")[0])) and t.is_correct(ex, f"\\boxed{{{ex.answer}}}")
    import datasets
    datasets.Dataset.from_pandas(frame).save_to_disk(str(tmp_path / "ds"))
    t = make_task("local_dataset", path=str(tmp_path / "ds"), prompt_field="question", answer_field="solution",
                  reference_extract="hash")
    assert len(t.source.examples) == 12 and t.source.examples[0].answer == "0"


def test_prompting_chat_template_and_plain_text(tmp_path, rows):
    from grpolab.world.tokenizer import build_char_tokenizer
    task = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a", system="Be brief.",
                     template="Q: {prompt}\nPut the answer in \\boxed{}.", extract="boxed")
    example = task.splits(0, 5, 5)[0][0]
    plain = task.render([example], build_char_tokenizer())[0]     # no chat template: plain text
    assert plain.prompt == f"Be brief.\n\nQ: {example.prompt}\nPut the answer in \\boxed{{}}."
    assert plain.meta["question"] == example.prompt and plain.answer == example.answer
    chat_tok = build_char_tokenizer()
    chat_tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
                              "{% if add_generation_prompt %}<assistant>{% endif %}")
    chat = task.render([example], chat_tok)[0]
    assert chat.prompt == f"<system>Be brief.</system><user>Q: {example.prompt}\nPut the answer in \\boxed{{}}.</user><assistant>"
    forced = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a", chat=True)
    with pytest.raises(ConfigError, match="task.chat"):
        forced.render([example], build_char_tokenizer())


def test_user_reward_called_with_documented_arguments(rows, user_module):
    task = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a", extract="last_number",
                     rewards=["correctness", {"name": "my_rewards:recording", "weight": 0.5, "params": {"bonus": 2.0}},
                              {"name": "my_rewards:picky", "label": "picky_exact"}])
    assert task.reward_names == ("correctness", "recording", "picky_exact") and task.reward_weights == (1.0, 0.5, 1.0)
    train = task.splits(0, 10, 2)[0]
    funcs = task.reward_funcs(train, max_len=16)
    assert [f.__name__ for f in funcs] == ["correctness", "recording", "picky_exact"]
    completions = [f"= {train[0].answer}", "no idea", train[1].answer]
    kwargs = dict(prompts=["p"] * 3, completions=completions, completion_ids=[[1, 2], [1, 2, 3], [4]], idx=[0, 0, 1])
    assert funcs[0](**kwargs) == [1.0, 0.0, 1.0]
    assert funcs[1](**kwargs) == [2.0 * len(c) for c in completions]
    assert funcs[2](**kwargs) == [0.0, 0.0, 1.0]
    first = user_module.CALLS[0]
    assert first == {"prompt": train[0].prompt, "completion": completions[0], "answer": train[0].answer,
                     "extracted": train[0].answer, "meta": train[0].meta, "completion_length": 2, "bonus": 2.0}
    assert user_module.CALLS[1]["extracted"] is None and user_module.CALLS[2]["completion_length"] == 1


def test_failing_rewards_score_on_error_count_and_stop_when_all_fail(rows, user_module):
    task = make_task("local_dataset", path=str(rows), prompt_field="q", answer_field="a",
                     rewards=[{"name": "my_rewards:flaky", "on_error": -1.0},
                              {"name": "my_rewards:slow", "timeout_s": 0.2},
                              "my_rewards:not_a_number", "my_rewards:always_raises"])
    train = task.splits(0, 10, 2)[0]
    flaky, slow, nan, always = task.reward_funcs(train, max_len=16)
    logged = {}
    kwargs = dict(prompts=["p"] * 4, completions=["12", "13", "8", "5"], completion_ids=[[1]] * 4, idx=[0, 1, 2, 3],
                  log_metric=lambda name, value: logged.__setitem__(name, value))
    assert flaky(**kwargs) == [1.0, -1.0, 1.0, -1.0]
    assert logged["rewards/flaky/failure_rate"] == 0.5 and task.rewards[0].failures == 2 and task.rewards[0].calls == 4
    with pytest.raises(RewardFailedError, match="'slow' failed on every completion.*RewardTimeout"):
        slow(**{**kwargs, "completions": ["1"], "completion_ids": [[1]], "idx": [0]})
    with pytest.raises(RewardFailedError, match="not_a_number.*expected a finite number"):
        nan(**kwargs)
    with pytest.raises(RewardFailedError, match="always_raises.*reward service down"):
        always(**kwargs)
    assert task.score(train[0], "12") == {"flaky": 1.0, "slow": 0.0, "not_a_number": 0.0, "always_raises": 0.0}


def test_task_weights_become_the_method_reward_weights(rows, user_module):
    from grpolab.experiment.config import build_config
    base = {"task": {"name": "local_dataset", "path": str(rows), "prompt_field": "q", "answer_field": "a",
                     "rewards": ["correctness", {"name": "format", "weight": 0.25}], "extract": "last_number"},
            "model": {"preset": "tiny"}, "method": "gdpo", "eval": {"prompts": 4}}   # the 8-row file holds 4 held out
    cfg = build_config(base)
    assert cfg.spec.reward_weights == (1.0, 0.25) and cfg.task["rewards"][1]["weight"] == 0.25
    with pytest.raises(ConfigError, match="method.reward_weights"):
        build_config({**base, "method": {"base": "gdpo", "reward_weights": [1.0, 0.5]}})


BAD_INPUTS = [
    ({"task": {"name": "gsm9k"}}, "task.name: unknown task 'gsm9k'"),
    ({"task": {"name": "local_dataset", "path": "ROWS", "prompt_field": "question"}}, "task.prompt_field: column 'question'"),
    ({"task": {"name": "local_dataset", "path": "ROWS", "prompt_field": "q", "answer_field": "a",
               "template": "Solve this."}}, "task.template: must be a string containing the placeholder {prompt}"),
    ({"task": {"name": "local_dataset", "path": "ROWS", "prompt_field": "q", "answer_field": "a",
               "rewards": ["correctness", "no_such_module_xyz:fn"]}}, "task.rewards[1]: cannot import module 'no_such_module_xyz'"),
    ({"task": {"name": "local_dataset", "path": "ROWS", "prompt_field": "q", "answer_field": "a",
               "rewards": ["my_rewards:wants_unknown"]}}, "task.rewards[0]: the reward function takes 'temperature_of_mars'"),
    ({"task": {"name": "reasoning_gym", "dataset": "no_such_gym"}}, "task.dataset: unknown reasoning-gym dataset"),
    ({"task": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "config": {"min_terms": 5, "max_terms": 2}}},
     "task.config: not a valid basic_arithmetic configuration"),
    ({"model": {"path": "/nowhere/model.Q4_0.gguf"}}, "model.path: GGUF file '/nowhere/model.Q4_0.gguf' does not exist"),
    ({"model": {"preset": "smollm3"}}, "model.preset: unknown preset 'smollm3'"),
]


@pytest.mark.parametrize("patch, needle", BAD_INPUTS)
def test_bad_task_and_model_input_exits_2_through_the_cli(tmp_path, rows, user_module, capsys, patch, needle):
    import yaml
    from grpolab.cli import main
    data = {"name": "bad", "task": {"name": "addition"}, "model": {"preset": "tiny"}, "train": {"steps": 1}}
    for key, value in patch.items():
        data[key] = json.loads(json.dumps(value).replace("ROWS", str(rows)))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    state = tmp_path / "state"
    assert main(["--state", str(state), "run", str(path)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], errors
    assert not (state / "mlflow.db").exists() and not (state / "models").exists()   # nothing recorded, no model



def _local_run_config(path, model_dir, rewards):
    from grpolab.experiment.config import build_config
    return build_config({"name": "rewards", "method": "grpo", "model": {"path": str(model_dir)},
                         "task": {"name": "local_dataset", "path": str(path), "extract": "last_number",
                                  "grade": "numeric", "max_completion_length": 4, "rewards": rewards},
                         "train": {"steps": 2, "group_size": 4, "prompts_per_rollout": 2},
                         "eval": {"every": 0, "prompts": 4, "k": 2}})


def test_a_raising_reward_is_counted_and_the_run_goes_on_all_failing_stops_it(
        shared_state, tiny_model_dir, tmp_path, user_module):
    from mlflow.tracking import MlflowClient
    from grpolab.experiment.runner import run_experiment
    from grpolab.tracking.recorder import tracking_uri
    path = write_sums(tmp_path / "sums.jsonl")
    cfg = _local_run_config(path, tiny_model_dir, ["correctness", {"name": "my_rewards:alternating", "on_error": -1.0}])
    result = run_experiment(cfg, shared_state)
    c = MlflowClient(tracking_uri(shared_state))
    run = c.get_run(result.run_id)
    assert run.info.status == "FINISHED" and result.steps == 2
    history = c.get_metric_history(result.run_id, "rewards/alternating/failure_rate")
    assert [m.value for m in history] == [0.5, 0.5]          # 4 of the 8 completions of each rollout
    assert c.get_metric_history(result.run_id, "rewards/alternating/mean")[0].value == pytest.approx((-1.0 + 0.5) / 2)
    bad = _local_run_config(path, tiny_model_dir, ["correctness", "my_rewards:always_raises"])
    with pytest.raises(RewardFailedError):
        run_experiment(bad, shared_state)
    failed = c.search_runs([run.info.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)[0]
    assert failed.info.status == "FAILED"
    assert "reward 'always_raises' failed on every completion" in failed.data.tags["grpolab.error"]
    assert "reward service down" in failed.data.tags["grpolab.error"]


def test_bounded_estimators_refuse_task_rewards_outside_the_unit_interval(rows):
    from grpolab.experiment.config import build_config
    task = {"name": "local_dataset", "path": str(rows), "prompt_field": "q", "answer_field": "a", "extract": "last_number"}

    def config(rewards):
        return build_config({"task": {**task, "rewards": rewards}, "model": {"preset": "tiny"}, "method": "maxrl",
                             "eval": {"prompts": 4}})

    assert config(["correctness", {"name": "format", "weight": 0.0}]).spec.reward_weights == (1.0, 0.0)
    assert config([{"name": "correctness", "weight": 0.75}, {"name": "format", "weight": 0.25}]).spec.advantage == "maxrl"
    with pytest.raises(ConfigError, match=r"method.advantage=maxrl needs rewards in \[0, 1\].*weights \[1.0, 0.25\]"):
        config(["correctness", {"name": "format", "weight": 0.25}])
    with pytest.raises(ConfigError, match="has the reward 'length', which is negative"):
        config(["correctness", {"name": "length", "weight": 0.0}])
