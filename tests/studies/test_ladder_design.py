"""The shipped ladder's design: one fixed benchmark shared by every seed and rung, disjoint from
every train stream (the warm start's SFT data included), seeds on demand, and each design choice
recorded as a deviation of the study file."""

import json
from pathlib import Path

import pytest

from grpolab.errors import ConfigError
from grpolab.experiment.config import build_config
from grpolab.experiment.overrides import apply_overrides
from grpolab.experiment.runner import run_splits
from grpolab.experiment.starting_model import warm_start_config
from grpolab.studies.definition import load_study
from grpolab.world.generated import make_task
from grpolab.world.warmstart import cache_key, sft_splits

REPO = Path(__file__).resolve().parents[2]
LADDER = REPO / "studies" / "dapo_table1.yaml"


def _prompts(examples) -> list[str]:
    return [e.prompt for e in examples]


def test_final_benchmark_is_one_set_for_every_seed_and_rung_and_disjoint_from_training():
    study = load_study(LADDER)
    benchmarks, models = set(), set()
    for rung in range(len(study.rungs)):
        for seed in (study.seeds[0], study.seeds[1], study.seeds[0] + study.on_demand.cap - 1):
            cfg = build_config(study.rung_experiment(rung, seed))
            task = make_task(cfg.task["name"], **{k: v for k, v in cfg.task.items() if k != "name"})
            train, held_out = run_splits(cfg, task)
            assert len(held_out) == cfg.eval.final_prompts == 1024 and cfg.eval.final_k == 2
            assert not set(_prompts(train)) & set(_prompts(held_out))       # this seed's train stream
            assert len(train) == cfg.train.n_train_prompts
            benchmarks.add(tuple(_prompts(held_out)))
            models.add((cfg.model.path, cfg.model.sha256))
    assert len(benchmarks) == 1 and len(models) == 1                        # one benchmark, one base model
    held = set(next(iter(benchmarks)))
    # the shipped base model is the warm start its provenance names; its SFT data and band check
    # kept out of the benchmark
    provenance = json.loads((REPO / cfg.model.path / "base_model.json").read_text())
    settings = provenance["warm_start_settings"]   # every warm_start setting the export ran with
    assert settings["seed"] == provenance["warm_start_seed"]
    trained = build_config(apply_overrides(study.rung_experiment(0, study.seeds[0]),
                                           ["model.path=null", f"model.preset={provenance['preset']}", "model.sha256=null",
                                            *(f"warm_start.{k}={v}" for k, v in settings.items())]))
    ws = warm_start_config(trained)
    key = cache_key(trained.model.preset, task, trained.warm_start.seed, ws)
    assert provenance["warm_start_cache"] == f"{trained.model.preset}-{task.name}-{key}"
    sft, band_check = sft_splits(task, trained.warm_start.seed, ws)
    assert not set(_prompts(sft)) & held and not set(_prompts(band_check)) & held   # nor the warm start's
    assert len(band_check) == ws.eval_prompts
    # the curves' evaluations use the benchmark's first eval.prompts prompts
    _, small = task.splits(5, 10, cfg.eval.prompts, held_out_seed=cfg.eval.seed)
    assert _prompts(small) == list(next(iter(benchmarks)))[:cfg.eval.prompts]


def test_per_seed_held_out_sets_differ_without_a_fixed_seed():
    task = make_task("addition_scratchpad", digits=2)
    assert _prompts(task.splits(0, 10, 64)[1]) != _prompts(task.splits(1, 10, 64)[1])
    assert _prompts(task.splits(0, 10, 64)[1]) == _prompts(task.splits(1, 10, 64, held_out_seed=0)[1])


def test_design_choices_are_recorded_as_deviations():
    study = load_study(LADDER)
    assert study.name == "dapo_table1_columns" and study.seeds == tuple(range(300, 316))   # fresh seeds
    assert tuple(study.on_demand) == (16, 64, None)   # each run of the command is bounded by --time-limit instead
    changes = " ".join(d.change for d in study.deviations)
    seen = " ".join(d.after_seeing for d in study.deviations)
    for part in ("task addition_columns", "cap 54", "learning rate 1e-4", "read the whole run", "warm start of seed 3000",
                 "run seeds from 300"):
        assert part in changes
    for part in ("pilots", "0.0165 in the last quarter", "0.039-0.044 over the whole run", "3e-4 0.24-0.28 %"):
        assert part in seen


@pytest.mark.parametrize("seeds, message", [
    ({"first": 16, "batch": 16}, "exactly first, batch, cap"),
    ({"first": 16, "batch": 0, "cap": 48}, "batch >= 1"),
    ({"first": 50, "batch": 16, "cap": 48}, "first <= cap"),
    ({"first": 16, "batch": 16, "cap": 48, "max_rows": 0}, "seeds.max_rows: need a positive integer"),
    ({"first": 16, "batch": 16, "cap": 48, "max_row": 300}, "optionally max_rows"),
    ({"first": 16, "batch": 16, "cap": 48, "start": -1}, "seeds.start: need an integer >= 0"),
])
def test_bad_seeds_design_is_refused(tmp_path, seeds, message):
    text = LADDER.read_text().replace("seeds: {first: 16, batch: 16, cap: 64, start: 300}", f"seeds: {seeds}")
    assert text != LADDER.read_text()
    path = tmp_path / "ladder.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_study(path)


@pytest.mark.parametrize("eval_keys, message", [
    ({"final_prompts": 32}, "must be >= eval.prompts"),
    ({"seed": -2}, "eval.seed"),
    ({"final_k": -1}, "final_k"),
])
def test_bad_final_eval_is_refused(eval_keys, message):
    with pytest.raises(ConfigError, match=message):
        build_config({"task": {"name": "addition"}, "eval": {"prompts": 64, **eval_keys}})


def test_study_adds_seeds_on_demand_by_default_and_fixed_seeds_runs_the_first_only(tmp_path, shared_state, capsys):
    """`grpolab study FILE` follows the file's seeds: {first, batch, cap} design (the looks at 2 and
    3 seeds are planned and kept with the study); --fixed-seeds runs seeds 0..first-1 and adds none."""
    import yaml

    from grpolab.analysis.ablation import load_results
    from grpolab.cli import main
    from grpolab.studies.storage import SEQUENTIAL_ATTR
    from conftest import tiny_two_rung_ladder
    study = tiny_two_rung_ladder(seeds={"first": 2, "batch": 1, "cap": 3})
    for name in ("on_demand_default", "on_demand_fixed"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**study, "name": name}))
    state = ["--state", str(shared_state)]
    assert main([*state, "study", str(tmp_path / "on_demand_default.yaml"), "--workers", "1"]) == 0
    assert "look 1/2 at 2 seeds (per-look level 97.5 %)" in capsys.readouterr().out
    _, default = load_results(str(tmp_path / "on_demand_default.yaml"), shared_state, None)
    assert default.user_attrs[SEQUENTIAL_ATTR]["looks"] == [2, 3]
    assert main([*state, "study", str(tmp_path / "on_demand_fixed.yaml"), "--workers", "1", "--fixed-seeds"]) == 0
    _, fixed = load_results(str(tmp_path / "on_demand_fixed.yaml"), shared_state, None)
    assert SEQUENTIAL_ATTR not in fixed.user_attrs and len([t for t in fixed.trials if t.state.name == "COMPLETE"]) == 4
    assert main([*state, "study", str(tmp_path / "on_demand_fixed.yaml"), "--fixed-seeds", "--until-decided"]) == 2
    assert "--fixed-seeds: not with --until-decided" in capsys.readouterr().err


def test_seeds_on_demand_run_only_the_rows_undecided_rungs_need(tmp_path, shared_state, capsys):
    """A rung settled at a look gets no more pairs unless a neighbour needs its rows: here rung b
    raises the upper clip of a 1-step on-policy run, where the ratio is exactly 1, so its
    mechanism (clipped fraction above a floor) did not act and it is settled at look 1; rung c is
    underpowered at 2 seeds, so the added seed runs rungs b and c only, and the table's answer
    line counts b's pairs at the look that settled it. The third look would pass the design's
    max_rows, so it is not started; the dashboard and the parent run's table, published as the
    looks ended, say so and list the seeds of each look."""
    import yaml

    from grpolab.analysis.ablation import ladder_table, ladder_rows, load_results
    from grpolab.studies.until_decided import rows_needed
    from grpolab.cli import main
    from grpolab.report.tables import answer_lines
    from conftest import tiny_two_rung_ladder
    assert rows_needed([2, 4]) == (1, 2, 3, 4) and rows_needed([1]) == (0, 1)
    study = tiny_two_rung_ladder(name="stop_per_rung", seeds={"first": 2, "batch": 1, "cap": 4, "max_rows": 8})
    study["base"]["eval"] = {"prompts": 32, "k": 2}
    study["rungs"] = [{"name": "a"}, {"name": "b", "changes": {"method.eps_high": 0.28},
                       "mechanism": {"metric": "tail:clip/high_fraction", "at_least": 0.5}},
                      {"name": "c", "changes": {"train.learning_rate": 0.003}}]
    path = tmp_path / "stop_per_rung.yaml"
    path.write_text(yaml.safe_dump(study))
    assert main(["--state", str(shared_state), "study", str(path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    cfg, optuna_study = load_results(str(path), shared_state, None)
    rows = ladder_rows(optuna_study, cfg)
    done = rows[rows.state == "COMPLETE"]
    assert "look 2/3 runs rungs 1, 2 (the paired differences of undecided rungs 2)" in out
    assert "stopped after look 2/3 at 3 seeds: look 3's 2 rows would pass max_rows 8 (8 rows ran)" in out
    assert sorted(map(tuple, done[["rung", "seed"]].values.tolist())) == [
        (0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    frame = ladder_table(rows, cfg, 0, shared_state)
    assert list(frame.pairs.iloc[1:]) == [2, 3]
    assert "(2 paired seeds); familywise: " in answer_lines(frame)[1]
    stop = "stopped after look 2/3 at 3 seeds: look 3"
    looks = "looks planned at 2, 3, 4 seeds: look 1 seeds 0-1, look 2 adds 2;"
    page = (Path(shared_state) / "dashboards" / "stop_per_rung.html").read_text()   # published as the looks ended
    assert stop in page and looks in page
    from mlflow.tracking import MlflowClient

    from grpolab.studies.rows import PARENT_RUN_ATTR
    from grpolab.tracking.recorder import tracking_uri
    table = Path(MlflowClient(tracking_uri(shared_state)).download_artifacts(
        optuna_study.user_attrs[PARENT_RUN_ATTR], "table.md", str(tmp_path))).read_text()
    assert stop in table and looks in table


def _planned_ladder_rows(values: dict) -> "object":
    import pandas as pd
    return pd.DataFrame([{"rung": r, "seed": s, "state": "COMPLETE", "value": v, "run_id": "", "trial": 0}
                         for (r, s), v in values.items()])


def test_a_rung_is_judged_on_its_largest_complete_planned_look():
    """Looks planned at 6 and 12 seeds; the second look was stopped part-way: seeds 106-108 are
    complete for rungs a and b, not the rest. Rung b is judged on the 6 seeds of look 1 (the
    interval of a planned look at the level it states), its 3 complete pairs beyond it counted in
    n and mean and named in its why; rung c, whose look 2 is complete, on all 12."""
    import numpy as np

    from grpolab.analysis.ablation import SequentialLooks, ladder_table
    from grpolab.analysis.ladder_verdicts import judged_seeds
    from grpolab.studies.definition import Objective, Rung, StudyConfig
    cfg = StudyConfig(name="x", kind="ladder", path="x", base={}, seeds=tuple(range(100, 112)),
                      objectives=(Objective("final:eval/pass_at_1", smallest_effect=0.02),),
                      rungs=(Rung("a", {}), Rung("b", {"k": 1}), Rung("c", {"k": 2})))
    rng = np.random.default_rng(0)
    base = {s: 0.25 + rng.normal(0, 0.03) for s in range(100, 112)}
    values = {(0, s): base[s] for s in range(100, 109)}
    values.update({(1, s): base[s] + 0.05 + rng.normal(0, 0.01) for s in range(100, 112)})
    values.update({(2, s): values[(1, s)] + rng.normal(0, 0.01) for s in range(100, 112)})
    rows = _planned_ladder_rows(values)
    frame = ladder_table(rows, cfg, 0, None, SequentialLooks(0.975, 2, (6, 12)))
    first = [values[(1, s)] - values[(0, s)] for s in range(100, 106)]
    assert frame.n.tolist() == [9, 12, 12] and frame.pairs.tolist()[1:] == [6, 12]
    assert frame.delta_vs_prev[1] == pytest.approx(np.mean(first))
    assert "judged on the 6 seeds of look 1; 3 more paired seed(s) beyond it not judged" in frame.why[1]
    assert "beyond it" not in frame.why[2]
    unplanned = ladder_table(rows, cfg, 0, None, SequentialLooks(0.975, 2))   # no plan: every complete pair
    assert unplanned.pairs[1] == 9
    done = rows[~((rows.rung == 0) & (rows.seed == 101))]   # look 1 itself incomplete (a paused study)
    assert judged_seeds(done, (0, 1), cfg.seeds, (6, 12)).look == -1
    interim = ladder_table(done, cfg, 0, None, SequentialLooks(0.975, 2, (6, 12)))
    # an interim look outside the plan: no label, no familywise label, no test in the family; face value kept
    assert interim.label[1] == interim.verdict_vs_prev[1] == "not judged yet: look 1 incomplete"
    assert "look 1 is incomplete for this pair (5 of its 6 seeds have both rows complete)" in interim.why[1]
    assert "at face value: " in interim.why[1] and interim.family_label[1] == "" and not interim.fragile[1]
    assert interim.label[2] != "not judged yet: look 1 incomplete"   # rungs b and c have their look 1 complete


CLAIM_STUDIES = ("clip_higher_entropy", "gspo_clipping", "dr_grpo_length", "dynamic_sampling_efficiency",
                 "zero_variance")


@pytest.mark.parametrize("name", CLAIM_STUDIES)
def test_each_claim_study_has_one_held_out_set_fresh_seeds_and_its_design_as_a_deviation(name):
    """The studies behind `grpolab verdicts`, designed as the ladder: one held-out set for every seed
    and rung, disjoint from each train stream; one base model where there is a warm start; seeds from
    100 (no earlier row repeated); the v2 registration recorded as a deviation."""
    study = load_study(REPO / "studies" / f"{name}.yaml")
    assert study.name == f"{name}_v2" and study.seeds[0] == 100
    last = study.seeds[0] + (study.on_demand.cap if study.on_demand else len(study.seeds)) - 1
    held_outs, warm_starts = set(), set()
    for rung in range(len(study.rungs)):
        for seed in (study.seeds[0], last):
            cfg = build_config(study.rung_experiment(rung, seed))
            task = make_task(cfg.task["name"], **{k: v for k, v in cfg.task.items() if k != "name"})
            train, held_out = run_splits(cfg, task)
            assert cfg.eval.seed == 1000 and not set(_prompts(train)) & set(_prompts(held_out))
            held_outs.add(tuple(_prompts(held_out)))
            if cfg.warm_start.enabled:
                warm_starts.add(cache_key(cfg.model.preset, task, cfg.warm_start.seed, warm_start_config(cfg)))
    assert len(held_outs) == 1 and len(warm_starts) <= 1
    assert any(d.change.startswith(f"registered as {name}_v2: fresh seeds") for d in study.deviations)


def test_a_claim_study_that_adds_seeds_stops_on_its_claims_own_metric_effect_and_mechanism():
    """Where a claim study adds seeds on demand, its looks stop on what the claim judges: the same
    metric (direction mirrored when the claim's treatment is the first rung) and smallest effect, and
    a precondition floor on the same curve no stricter than the claim's (a study never stops a claim
    whose precondition held as 'precondition not met'). A ratio claim (scale: log10) is judged on
    another scale than its study's registered objective, so its study's looks are not compared."""
    from grpolab.analysis.claims import claim_files, load_claim
    checked = 0
    for path in claim_files(None):
        claim = load_claim(path)
        study = load_study(claim.study_path)
        if (not study.on_demand or claim.control.rung is None or claim.scale != "linear"
                or claim.metric_of(claim.treatment) != study.objectives[0].metric):
            continue
        objective, names = study.objectives[0], [r.name for r in study.rungs]
        later = names.index(claim.treatment.rung) > names.index(claim.control.rung)
        claimed = {"increase": "maximize", "decrease": "minimize"}[claim.direction]
        mirrored = {"maximize": "minimize", "minimize": "maximize"}[claimed]
        assert objective.direction == (claimed if later else mirrored) and objective.smallest_effect == claim.smallest_effect
        rung = study.rungs[max(names.index(claim.treatment.rung), names.index(claim.control.rung))]
        assert rung.mechanism.metric == claim.mechanism.metric and rung.mechanism.at_least <= claim.mechanism.at_least
        checked += 1
    assert checked >= 3      # clip_higher_entropy, grpo_lengthens_incorrect and the ladder's overlong filtering


def test_the_zero_variance_claim_study_runs_past_the_empty_update_guard_and_learns_nothing(shared_state):
    """Every batch of the cold-start study has no gradient by construction, so its rows must not be
    stopped by the empty-update guard (20 such batches in a row): one row at 21 steps completes, and
    its parameters are where they started, exactly (the claim's measure, policy/param_change)."""
    from grpolab.experiment.runner import run_experiment
    study = load_study(REPO / "studies" / "zero_variance.yaml")
    experiment = study.rung_experiment(0, study.seeds[0])
    experiment["train"] = {**experiment["train"], "steps": 21}
    result = run_experiment(build_config(experiment), shared_state)
    assert result.status == "FINISHED" and result.steps == 21
    assert result.train_curves["policy/param_change"] == [(0, 0.0), (21, 0.0)]
    assert result.evals[21]["eval/greedy_accuracy"] == result.evals[0]["eval/greedy_accuracy"]


def test_a_plan_that_stopped_at_its_first_look_is_judged_on_that_look():
    """Seeds of later looks never added (the study stopped at look 1): the judged look is look 1,
    not a later one whose seed slice would only repeat the first look's seeds."""
    import pandas as pd

    from grpolab.analysis.ladder_verdicts import judged_seeds
    seeds = tuple(range(100, 108))
    done = pd.DataFrame({"rung": [0] * 8 + [1] * 8, "seed": list(seeds) * 2})
    judged = judged_seeds(done, (0, 1), seeds, (8, 16, 24, 32))
    assert (judged.look, judged.size, judged.seeds) == (1, 8, frozenset(seeds))
