"""Claims as data: every shipped claim validates and cites its source; bad claims are refused
before anything runs; one small real end-to-end verdict through the study driver."""

import math
import re

import pytest
import yaml

from conftest import REPO, tiny_two_rung_ladder
from grpolab.analysis.claims import CLAIMS_DIR, claim_files, load_claim
from grpolab.errors import ConfigError
from grpolab.analysis.verdicts import DECIDED, LABELS

CITATION = re.compile(r"arXiv:\d{4}\.\d{5}\).*(Section|Table|Figure)")


def test_at_least_eight_shipped_claims_each_cited_and_in_a_regime():
    claims = [load_claim(p) for p in claim_files(None)]      # loads and checks every referenced study and rung
    assert len(claims) >= 8 and len({c.name for c in claims}) == len(claims)
    for c in claims:
        assert CITATION.search(c.source), c.source
        assert c.statement and c.regime and c.smallest_effect > 0
    sources = " ".join(c.source for c in claims)
    assert "DAPO" in sources and "Dr. GRPO" in sources and "GSPO" in sources
    assert {"rollout_reuse", "free_length", "cold_start"} <= {r for c in claims for r in c.requires}
    # every claim names the curve that shows its mechanism acting, with a floor
    assert all(c.mechanism is not None and c.mechanism.metric for c in claims), [c.name for c in claims if not c.mechanism]
    # what the review found changed after the data were seen is declared, not only in comments
    by_name = {c.name: c for c in claims}
    assert any("0.3 -> 0.5" in d.change for d in by_name["dynamic_sampling_fewer_steps"].deviations)
    assert by_name["zero_variance_no_learning"].kind == "construction_check"
    assert "maximum" in by_name["upper_clipped_low_probability"].statistic_note


def _claim(tmp_path, **changes):
    data = yaml.safe_load((CLAIMS_DIR / "clip_higher_entropy.yaml").read_text())
    data.update(changes)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"colour": 1}, "colour: unknown key"),
    ({"treatment": {"rung": "eps_high 9"}}, "treatment.rung: 'eps_high 9' is not a rung of clip_higher_entropy"),
    ({"direction": "up"}, "direction: 'up'; valid: increase, decrease, none"),
    ({"metric": "tail"}, "metric"),
    ({"smallest_effect": 0}, "smallest_effect: expected a positive number"),
    ({"requires": ["free_length"]}, "requires free_length, but rung"),
    ({"requires": ["magic"]}, "requires: unknown 'magic'"),
    ({"control": {"value": 0.2, "rung": "eps_high 0.2"}}, "control: expected"),
    ({"mechanism": {"metric": "tail:clip/high_fraction"}}, "mechanism: expected {metric: M, at_least: NUMBER"),
    ({"mechanism": {"metric": "tail:x", "at_least": 0.1, "rows": "both"}}, "mechanism.rows: 'both'; valid: control, treatment"),
    ({"kind": "replication"}, "kind: 'replication'; valid: reproduction, construction_check"),
    ({"deviations": [{"date": "yesterday", "change": "x", "after_seeing": "y"}]}, "deviations[0].date: expected YYYY-MM-DD"),
    ({"deviations": [{"date": "2026-11-25", "change": "x"}]}, "deviations[0]: expected exactly the keys date, change, after_seeing"),
])
def test_bad_claims_are_refused_naming_the_key(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_claim(_claim(tmp_path, study=str(REPO / "studies/clip_higher_entropy.yaml"), **changes))


def test_unknown_claim_name_lists_the_shipped_ones():
    with pytest.raises(ConfigError, match="shipped claims: .*clip_higher_entropy"):
        claim_files(["no_such_claim"])


CLAIM_B_BEATS_A = {"source": "test (arXiv:0000.00000), Section 1", "statement": "b beats a",
                   "treatment": {"rung": "b"}, "control": {"rung": "a"}, "metric": "final:eval/pass_at_1",
                   "direction": "increase", "smallest_effect": 0.05, "regime": "none needed"}


def write_study_and_claim(tmp_path, study: dict, claim_name: str):
    """The study file next to a claims/ folder holding one 'b beats a' claim on it; the claim's path."""
    (tmp_path / f"{study['name']}.yaml").write_text(yaml.safe_dump(study))
    (tmp_path / "claims").mkdir()
    path = tmp_path / "claims" / f"{claim_name}.yaml"
    path.write_text(yaml.safe_dump({**CLAIM_B_BEATS_A, "study": f"{study['name']}.yaml"}))
    return path


def test_verdict_end_to_end_reads_the_same_values_the_study_table_holds(tmp_path, shared_state):
    """Two rungs x 5 seeds, 1 step each, run through the study driver; the claim's paired
    differences must equal the differences of the Optuna trial values (the same objective)."""
    from grpolab.analysis.claim_runs import run_claims
    from grpolab.analysis.ablation import ladder_rows, load_results
    study = {"kind": "ladder", "name": "claim_e2e", "seeds": [0, 1, 2, 3, 4], "metric": "final:eval/pass_at_1",
             "base": {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
                      "model": {"preset": "tiny"}, "warm_start": {"seed": 0},
                      "train": {"group_size": 8, "prompts_per_rollout": 2, "learning_rate": 0.0005},   # warm start shared with test_studies
                      "eval": {"prompts": 8, "k": 2}},
             "budget": {"train.steps": 1, "eval.every": 0},
             "rungs": [{"name": "a"}, {"name": "b", "changes": {"train.learning_rate": 0.002}}]}
    path = write_study_and_claim(tmp_path, study, "b_beats_a")
    [result] = run_claims([str(path)], shared_state, None, 1, echo=lambda s: None)
    cfg, optuna_study = load_results(str(tmp_path / "claim_e2e.yaml"), shared_state, None)
    rows = ladder_rows(optuna_study, cfg)
    value = {(r.rung, r.seed): r.value for r in rows.itertuples()}
    expected = {s: value[(1, s)] - value[(0, s)] for s in range(5)}
    assert result.verdict.differences == pytest.approx(expected)
    assert result.verdict.n == 5 and result.verdict.interval == "95% paired t"
    assert result.verdict.verdict in LABELS
    assert result.verdict.family == 1 and math.isfinite(result.verdict.p["H0"])     # a family of one claim
    # registered before any row ran, unchanged: the most grpolab can verify, and it says no more
    assert result.preregistration.startswith("registered in this state ") and "before any of its rows ran" in result.preregistration
    assert result.verdict.mean == pytest.approx(sum(expected.values()) / 5)
    # a second call runs nothing new: rows stay exactly once
    run_claims([str(path)], shared_state, None, 1, echo=lambda s: None)
    _, again = load_results(str(tmp_path / "claim_e2e.yaml"), shared_state, None)
    assert len([t for t in again.get_trials() if "row" in t.user_attrs]) == 10


def test_until_decided_adds_paired_seeds_at_planned_looks_each_row_once(tmp_path, shared_state):
    """--until-decided on one claim, end to end: 5 seeds, then looks at 6 and 7 (batch 1, max 7),
    each at level 1 - 0.05/3; new seeds 5, 6 run through the study driver as rows of the same study,
    each row exactly once; the verdict says which look decided it (or that the seeds ran out)."""
    from grpolab.analysis.claim_runs import AddedSeeds, run_claims
    from grpolab.analysis.ablation import ladder_rows, load_results
    study = {"kind": "ladder", "name": "claim_seq", "seeds": [0, 1, 2, 3, 4], "metric": "final:eval/pass_at_1",
             "base": {"method": {"base": "grpo", "kl_coef": 0.0}, "task": {"name": "addition", "digits": 2},
                      "model": {"preset": "tiny"}, "warm_start": {"enabled": False},
                      "train": {"group_size": 4, "prompts_per_rollout": 2}, "eval": {"prompts": 4, "k": 1}},
             "budget": {"train.steps": 1, "eval.every": 0},
             "rungs": [{"name": "a"}, {"name": "b", "changes": {"train.learning_rate": 0.002}}]}
    path = write_study_and_claim(tmp_path, study, "seq")
    with pytest.raises(ConfigError, match="needs --max-seeds N with N >= the studies' seeds \\(5\\)"):
        run_claims([str(path)], shared_state, None, 1, echo=print, added=AddedSeeds(until_decided=True, max_seeds=3))
    lines = []
    [result] = run_claims([str(path)], shared_state, None, 1, echo=lines.append,
                              added=AddedSeeds(until_decided=True, max_seeds=7, batch=1))
    looks = [line for line in lines if re.match(r"look \d+/\d+ at ", line)]   # the judged looks
    assert looks[0].startswith("look 1/3 at 5 seeds (per-look level 98.33 %)")
    assert result.verdict.level == pytest.approx(1 - 0.05 / 3)
    decided = result.verdict.verdict in DECIDED
    assert len(looks) == 3 or (decided and len(looks) < 3)          # stops at the first look that decides
    assert result.verdict.n == 5 + len(looks) - 1                   # look j judges its first n_j seeds
    assert result.sequential.startswith(("decided at" if decided else "undecided after") + f" look {len(looks)} of 3")
    assert "looks planned at [5, 6, 7] seeds, each at 98.33 %" in result.sequential
    assert result.verdict.looks == 3
    cfg, optuna_study = load_results(str(tmp_path / "claim_seq.yaml"), shared_state, None)
    rows = ladder_rows(optuna_study, cfg)
    assert list(cfg.seeds) == list(range(5 + len(looks) - 1)) and (rows.state == "COMPLETE").all()
    keys = [t.user_attrs["row"] for t in optuna_study.get_trials() if "row" in t.user_attrs]
    assert len(keys) == len(set(keys)) == 2 * len(cfg.seeds)


def test_a_ladder_until_decided_keeps_its_level_in_the_table(tmp_path, shared_state):
    """`grpolab study LADDER --until-decided --max-seeds 6 --batch 1`: looks at 5 and 6 seeds at
    level 97.5 %, each row once; the table afterwards states that level and its intervals use it."""
    import csv
    import io

    from grpolab.analysis.until_decided import LADDER_LOOKS
    from grpolab.report.tables import study_table
    from grpolab.studies.definition import SeedsOnDemand
    from grpolab.studies.study_run import StudyRun
    from grpolab.studies.until_decided import run_until_decided
    study = tiny_two_rung_ladder(name="ladder_seq", seeds=[0, 1, 2, 3, 4])
    path = tmp_path / "ladder_seq.yaml"
    path.write_text(yaml.safe_dump(study))
    lines = []
    run = StudyRun.of(path, shared_state, workers=1, echo=lines.append)
    assert run_until_decided(run, SeedsOnDemand(batch=1, cap=6), LADDER_LOOKS) == 0
    looks = [line for line in lines if re.match(r"look \d+/\d+ at ", line)]   # the judged looks
    assert looks[0].startswith("look 1/2 at 5 seeds (per-look level 97.5 %)") and len(looks) in (1, 2)
    table = study_table(str(path), shared_state, None, "markdown")
    assert "97.5% paired t-interval" in table and "per-look level of seeds added until decided" in table
    assert "registered in this state" in table and "CHANGED" not in table        # added seeds change no field
    from grpolab.errors import ConfigError as Refused
    with pytest.raises(Refused, match="already follows the sequential plan of looks at \\[5, 6\\] seeds"):
        run_until_decided(run, SeedsOnDemand(batch=1, cap=8), LADDER_LOOKS)
    rows = list(csv.DictReader(io.StringIO(study_table(str(path), shared_state, None, "csv"))))
    assert int(rows[1]["n"]) == 4 + len(looks)


def test_a_study_file_edited_between_looks_stops_the_next_look_before_its_rows(tmp_path, shared_state):
    """The looks run on the definition read when they started. Look 2 runs while the file is
    unchanged (so a refusal is not the check's own doing); the file edited during look 2 (inside
    the judge of a decider that never decides) refuses look 3 before any of its seeds is queued,
    naming the file, and the rows of looks 1 and 2 stay complete."""
    from grpolab.studies.definition import SeedsOnDemand
    from grpolab.studies.study_run import StudyRun
    from grpolab.studies.until_decided import Look, run_until_decided
    path = tmp_path / "edited_mid_looks.yaml"
    study = tiny_two_rung_ladder(name="edited_mid_looks", seeds=[0, 1])
    path.write_text(yaml.safe_dump(study))
    judged = []

    class NeverDecides:   # the driver's decider protocol: three looks planned, every rung left open
        def plan(self, cfg, max_seeds, batch):
            return [2, 3, 4], 0.95

        def judge(self, run, n, level, looks):
            judged.append(n)
            if n == 3:   # the user edits the file while look 2 runs
                edited = {**study, "rungs": [study["rungs"][0], {"name": "b", "changes": {"train.learning_rate": 0.01}}]}
                path.write_text(yaml.safe_dump(edited))
            return Look(rows=2 * n, labels=["b: open"], open_rungs=[1])
    run = StudyRun.of(path, shared_state, workers=1, echo=lambda line: None)
    with pytest.raises(ConfigError, match=r"edited_mid_looks.yaml: the study file changed while --until-decided "
                                          r"ran its looks; look 3 is not started"):
        run_until_decided(run, SeedsOnDemand(batch=1, cap=4), NeverDecides())
    assert judged == [2, 3]
    from grpolab.studies.definition import load_study
    from grpolab.studies.storage import default_storage
    from grpolab.studies.trials import worker_loop
    with pytest.raises(ConfigError, match=r"edited_mid_looks.yaml: the study file changed after study "
                                          r"'edited_mid_looks' was set up from it; this worker runs no row"):
        worker_loop(load_study(path), default_storage(shared_state), shared_state)   # a worker process reads the edit
    from grpolab.analysis.ablation import load_results
    path.write_text(yaml.safe_dump(study))
    cfg, optuna_study = load_results(str(path), shared_state, None)
    rows = sorted((t.user_attrs["row"], t.state.name) for t in optuna_study.get_trials() if "row" in t.user_attrs)
    assert rows == [(f"r{r}-s{s}", "COMPLETE") for r in range(2) for s in range(3)] and list(cfg.seeds) == [0, 1, 2]


def test_a_claim_study_with_its_own_seeds_on_demand_plan_runs_it_and_is_judged_at_its_level(tmp_path, shared_state):
    """A claim study with seeds: {first, batch, cap} (as the shipped ones): plain `verdicts` runs the
    study's registered plan, and the claim is judged on its rows at the per-look level the plan
    recorded; --until-decided, whose looks would overwrite that plan, is refused naming the study."""
    from grpolab.analysis.ablation import ladder_rows, load_results
    from grpolab.analysis.claim_runs import AddedSeeds, run_claims
    from conftest import tiny_two_rung_ladder
    study = tiny_two_rung_ladder(name="claim_own_plan", seeds={"first": 5, "batch": 1, "cap": 6, "start": 20})
    path = write_study_and_claim(tmp_path, study, "own_plan")
    with pytest.raises(ConfigError, match="claim_own_plan.yaml register their own seeds-on-demand plan"):
        run_claims([str(path)], shared_state, None, 1, echo=print, added=AddedSeeds(until_decided=True, max_seeds=8))
    lines = []
    [result] = run_claims([str(path)], shared_state, None, 1, echo=lines.append)
    looks = [line for line in lines if re.match(r"look \d+/2 at ", line)]
    assert looks[0].startswith("look 1/2 at 5 seeds (per-look level 97.5 %)")
    assert result.verdict.level == pytest.approx(1 - 0.05 / 2) and result.verdict.looks == 2
    cfg, optuna_study = load_results(str(tmp_path / "claim_own_plan.yaml"), shared_state, None)
    rows = ladder_rows(optuna_study, cfg)
    assert result.verdict.n == len(set(rows.seed)) == 4 + len(looks)     # seeds 20.. at the looks that ran
    assert min(rows.seed) == 20 and "looks planned at [5, 6] seeds" in result.sequential
    # a row beyond the plan's last look (a seed added by hand) is stored but never judged
    from grpolab.studies.coordinator import run_study
    from grpolab.studies.study_run import StudyRun
    from grpolab.studies.definition import load_study
    from grpolab.studies.storage import add_seeds, default_storage
    add_seeds(load_study(tmp_path / "claim_own_plan.yaml"), default_storage(shared_state), 7)
    assert run_study(StudyRun.of(str(tmp_path / "claim_own_plan.yaml"), shared_state,
                                 workers=1, echo=lambda s: None)) == 0
    [again] = run_claims([str(path)], shared_state, None, 1, echo=lambda s: None)
    assert again.verdict.n == 6 and again.verdict.level == pytest.approx(0.975)


def test_a_shipped_base_model_is_in_its_band_only_when_its_provenance_says_so(tmp_path):
    """requires: [warm_start_band] on a study whose rows start from shipped files reads the files'
    provenance (base_model.json), and refuses a model without one: neither passes vacuously."""
    import shutil
    study = yaml.safe_load((REPO / "studies" / "dapo_table1.yaml").read_text())
    study["rungs"] = [{"name": "a"}, {"name": "b", "changes": {"train.learning_rate": 0.001}}]
    for key in ("deviations", "seeds"):
        study.pop(key)
    bare = tmp_path / "bare"
    shutil.copytree(REPO / study["base"]["model"]["path"], bare)
    (bare / "base_model.json").unlink()
    for path, needs in ((str(REPO / study["base"]["model"]["path"]), None), (str(bare), "requires warm_start_band")):
        study["base"]["model"] = {"path": path}
        (tmp_path / ("bare-study" if needs else "shipped-study")).mkdir()
        claim = write_study_and_claim(tmp_path / ("bare-study" if needs else "shipped-study"), study, "b_beats_a")
        text = yaml.safe_load(claim.read_text())
        claim.write_text(yaml.safe_dump({**text, "requires": ["warm_start_band"]}))
        if needs:
            with pytest.raises(ConfigError, match=needs):
                load_claim(claim)
        else:
            assert load_claim(claim).requires == ("warm_start_band",)
