"""The toy tasks' verifiers and generators."""

import random

import pytest

from grpolab.world.generated import TASKS, make_task


def ex_for(task, prompt):
    train, _ = task.splits(0, 2000, 50)
    return next(e for e in train if e.prompt == prompt) if prompt else train[0]


def test_addition_verifier_and_carries():
    t = make_task("addition", digits=2)
    train, held = t.splits(0, 500, 100)
    assert not {e.prompt for e in train} & {e.prompt for e in held}  # eval is held out
    e = train[0]
    a, b = e.meta["a"], e.meta["b"]
    assert e.prompt == f"{a}+{b}=" and t.is_correct(e, str(a + b)) and t.is_correct(e, f" {a + b} ")
    assert not t.is_correct(e, str(a + b + 1)) and not t.is_correct(e, f"{a + b}0")
    hard = make_task("addition", digits=3, min_carries=2)
    assert all(x.meta["carries"] >= 2 for x in hard.splits(1, 100, 10)[0])
    none = make_task("addition", digits=3, max_carries=0)
    assert all(x.meta["carries"] == 0 for x in none.splits(1, 100, 10)[0])


def test_splits_are_deterministic_in_the_seed():
    from grpolab.world import generated
    t = make_task("countdown")
    first = [e.prompt for e in t.splits(5, 50, 10)[0]]
    generated._SPLITS.clear()                                    # drawn again, not the kept draw
    assert first == [e.prompt for e in t.splits(5, 50, 10)[0]]
    assert [e.prompt for e in t.splits(5, 50, 10)[0]] != [e.prompt for e in t.splits(6, 50, 10)[0]]


def test_splits_asked_again_are_the_drawn_examples_in_fresh_lists():
    from grpolab.world import generated
    task = make_task("addition", digits=3)
    first = task.splits(7, 20, 5)
    generated._SPLITS.clear()
    drawn_again = task.splits(7, 20, 5)                      # drawn anew: equal
    second = task.splits(7, 20, 5)                           # kept: the same examples, not drawn again
    assert first == drawn_again == second
    assert all(a is b for a, b in zip(second[0] + second[1], task.splits(7, 20, 5)[0] + task.splits(7, 20, 5)[1]))
    second[0].clear()                                        # a caller's list is its own
    assert len(task.splits(7, 20, 5)[0]) == 20
    assert make_task("addition", digits=4).splits(7, 20, 5) != first   # the params are part of the key


def test_scratchpad_is_reward_neutral():
    t = make_task("addition_scratchpad", digits=2)
    e = t.splits(0, 10, 5)[0][0]
    assert t.score(e, e.answer)["correct"] == 1.0
    assert t.score(e, "whatever work here:" + e.answer)["correct"] == 1.0
    assert t.score(e, e.answer + ":1")["correct"] == 0.0
    lengths = {len(t.target(e, random.Random(i))) for i in range(20)}
    assert len(lengths) > 1  # SFT targets vary in length by design


def test_addition_columns_length_grows_with_width_and_spreads():
    from collections import Counter
    from grpolab.errors import ConfigError
    t = make_task("addition_columns")
    train, held = t.splits(0, 3000, 100)
    assert not {e.prompt for e in train} & {e.prompt for e in held}
    assert {e.meta["digits"] for e in train} == {2, 3, 4, 5}          # width drawn per prompt
    e = next(x for x in train if x.meta["digits"] == 4)
    assert t.is_correct(e, "any work:" + e.answer) and not t.is_correct(e, e.answer + ":1")
    work = {w: [len(t.target(x, random.Random(0))) for x in train if x.meta["digits"] == w] for w in (2, 5)}
    assert min(work[5]) > max(work[2])      # the column work (a fresh seed-0 draw) is longer for wider sums
    rng = random.Random(0)
    lengths = Counter(len(t.target(x, rng)) + 1 for x in train)
    assert max(lengths.values()) / len(train) < 0.3                     # no length holds 30 % of targets
    assert max(lengths) < t.max_completion_length
    skewed = Counter(x.meta["digits"] for x in make_task("addition_columns", width_decay=50).splits(0, 3000, 10)[0])
    assert skewed[2] > skewed[3] > skewed[4] > skewed[5] > 0                # a thin tail of wide sums
    assert {x.meta["digits"] for x in make_task("addition_columns", width_decay=0).splits(0, 50, 5)[0]} == {2}
    with pytest.raises(ConfigError, match="min_digits"):
        make_task("addition_columns", min_digits=5, max_digits=3)
    with pytest.raises(ConfigError, match="task.direct"):
        make_task("addition_columns", direct=101)
    with pytest.raises(ConfigError, match="task.checked"):
        make_task("addition_columns", checked=101)


def test_checked_column_work_writes_the_columns_twice_and_leaves_unchecked_targets_unchanged():
    from grpolab.world.generated import _column_work
    train, _ = make_task("addition_columns", min_digits=2, max_digits=3).splits(0, 400, 10)
    # checked 0 draws exactly as the writer did before the mode existed: direct or column work, one draw each
    rng, old_rng = random.Random(5), random.Random(5)
    plain = make_task("addition_columns", min_digits=2, max_digits=3)
    assert [plain.target(x, rng) for x in train] == \
        [x.answer if old_rng.random() * 100 < 50 else _column_work(x) for x in train]
    always = make_task("addition_columns", min_digits=2, max_digits=3, direct=0, checked=100)
    for x in train[:50]:
        work = _column_work(x)
        target = always.target(x, random.Random(0))
        assert target == work.rsplit(":", 1)[0] + ";" + work and always.is_correct(x, target)
        assert len(target) + 1 <= always.max_completion_length
    half = make_task("addition_columns", min_digits=2, max_digits=3, direct=0, checked=50)
    rng = random.Random(1)
    share = sum(";" in half.target(x, rng) for x in train) / len(train)
    assert 0.4 < share < 0.6, share


def test_format_task_has_two_components():
    t = make_task("addition_format")
    e = t.splits(0, 10, 5)[0][0]
    assert t.reward_names == ("format", "correct")
    assert t.score(e, f"({e.answer})") == {"format": 1.0, "correct": 1.0}
    assert t.score(e, e.answer) == {"format": 0.0, "correct": 1.0}
    assert t.score(e, "(1)") == {"format": 1.0, "correct": float(e.answer == "1")}


def test_countdown_verifier_uses_each_number_at_most_once():
    t = make_task("countdown", numbers=3)
    e = t.splits(0, 10, 5)[0][0]
    assert t.is_correct(e, e.answer)
    nums, target = e.meta["numbers"], e.meta["target"]
    assert not t.is_correct(e, "+".join(str(nums[0]) for _ in range(target)))  # reuse forbidden
    assert not t.is_correct(e, "__import__('os')")
    assert not t.is_correct(e, str(target) + "+0") or 0 in nums


def test_sorting_verifier():
    t = make_task("sorting", length=4)
    e = t.splits(0, 10, 5)[0][0]
    assert t.is_correct(e, ",".join(map(str, sorted(e.meta["numbers"]))))
    assert not t.is_correct(e, ",".join(map(str, e.meta["numbers"]))) or e.meta["numbers"] == sorted(e.meta["numbers"])


def test_random_reward_is_a_fair_coin_independent_of_correctness():
    t = make_task("random_reward")
    train = t.splits(0, 400, 10)[0]
    rewards = [t.score(e, e.answer)["random"] for e in train]
    assert 0.4 < sum(rewards) / len(rewards) < 0.6
    assert all(t.is_correct(e, e.answer) for e in train)
    assert t.score(train[0], "12") == t.score(train[0], "12")  # deterministic


def test_every_task_target_is_verified_correct():
    for name in TASKS:
        t = make_task(name)
        for e in t.splits(0, 30, 5)[0]:
            assert t.is_correct(e, t.target(e, random.Random(0))), name


def test_local_jsonl_dataset_task(tmp_path):
    import json
    from grpolab.errors import ConfigError
    from grpolab.tasks import make_task
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"{i}*2=", "answer": str(2 * i)}) for i in range(40)))
    t = make_task("local_dataset", path=str(path), eval_fraction=0.25)
    train, held = t.splits(0, 1000, 999)
    assert len(held) == 10 and len(train) == 30
    assert not {e.prompt for e in train} & {e.prompt for e in held}
    e = train[0]
    assert t.is_correct(e, e.answer) and not t.is_correct(e, e.answer + "1")
    assert t.target(e, random.Random(0)) == e.answer and t.max_completion_length == 2 + 4
    with pytest.raises(ConfigError, match="task.prompt_field: column 'prompt' is not in"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"question": "x"}\n' * 5)
        make_task("local_dataset", path=str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        make_task("local_dataset", path=str(tmp_path / "missing.jsonl"))


def test_every_task_kind_is_a_task_whose_splits_are_disjoint_and_capped(tmp_path):
    from conftest import write_sums
    from grpolab.tasks import make_task as make_any
    from grpolab.world.task import Task
    local = make_any("local_dataset", path=str(write_sums(tmp_path / "sums.jsonl")))
    for task in (make_any("addition", digits=3), make_any("gridworld"), local):
        assert isinstance(task, Task)
        train, held = task.splits(3, 10, 4)
        assert len(train) == 10 and len(held) == 4
        assert not {e.prompt for e in train} & {e.prompt for e in held}
    assert make_any("addition").fixed_held_out and not local.fixed_held_out
    with pytest.raises(TypeError, match="keeps its own held-out split"):
        local.splits(0, 4, 2, held_out_seed=1)
