"""The metric catalog (grpolab.tracking.metric_catalog) as the one home of every metric's facts:
every key the package logs has a record, docs/metrics.md is generated from it, and the places that
used to keep their own tables (required keys, ranges, weighting, TRL's names, the recorder's drops,
the dashboard's titles) read the values they had."""

import ast
import math
import re
import shutil
from pathlib import Path

from conftest import REPO
from grpolab.tracking.metric_catalog import CATALOG, lookup, range_of, render_doc, required_keys, trl_mirror
from grpolab.tracking.metric_record import VARIABLE

PACKAGE = REPO / "platform" / "grpolab"
CATALOG_FILES = {"metric_catalog.py", "metric_entries.py", "metric_entries_loss.py", "metric_record.py"}
METRIC_DICTS = {"stats", "trl_stats", "curves"}          # the dicts whose entries become curves
KEY_SHAPE = re.compile(r"^[a-z][a-z0-9_]*(?:/[A-Za-z0-9_.<>-]+)+$")
OBJECTIVE = re.compile(r"^(?:final|auc|tail|head|start|steps_to|tokens_to):([^<>=]+)(?:>=.*)?$")
NAMESPACES = {m.name.split("/")[0] for m in CATALOG if "/" in m.name}


def _text(node) -> str | None:
    """A string constant, or an f-string with ``<x>`` for each formatted part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "<x>" for v in node.values)
    return None


def _is_metrics_table(node) -> bool:
    """``self._metrics[mode]``: TRL's per-mode lists of logged values."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "_metrics"


def _bound(tree) -> list:
    """(name, value) of every plain or tuple assignment (``a, b = x, y`` pairs a with x)."""
    pairs = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    pairs.append((t.id, n.value))
                elif isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts):
                    pairs += [(e.id, v) for e, v in zip(t.elts, n.value.elts) if isinstance(e, ast.Name)]
    return pairs


def _written(tree) -> list:
    """Key nodes written on a logging path: entries of ``self._metrics[mode]`` (or a name bound to
    it), the key of a ``record_curve(key, value)`` call (the trainer's parts log through it, or a
    name bound to it), of the stats/curves dicts, of dicts returned by ``*_metrics`` functions, and
    of a dict passed to ``log_metrics``."""
    bound = _bound(tree)
    aliases = {name for name, value in bound if _is_metrics_table(value)}
    recorders = {name for name, value in bound if isinstance(value, ast.Attribute) and value.attr == "record_curve"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and (getattr(node.func, "attr", None) == "record_curve" or (
                isinstance(node.func, ast.Name) and node.func.id in recorders)):
            found.append(node.args[0])
        elif isinstance(node, ast.Subscript):
            table = node.value
            if _is_metrics_table(table) or (isinstance(table, ast.Name) and table.id in aliases) or (
                    isinstance(table, ast.Name) and table.id in METRIC_DICTS and isinstance(node.ctx, ast.Store)):
                found.append(node.slice)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                isinstance(t, ast.Name) and t.id in METRIC_DICTS for t in node.targets):
            found += node.value.keys
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "log_metrics" and node.args \
                and isinstance(node.args[0], ast.Dict):
            found += node.args[0].keys
        elif isinstance(node, ast.FunctionDef) and node.name.endswith("_metrics"):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    found += inner.keys
                elif isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store):
                    found.append(inner.slice)
    return [(n, _text(n)) for n in found if n is not None and _text(n) is not None]


def _named(tree) -> list:
    """Every other string shaped like a key of one of the catalog's namespaces (``clip/...``), or a
    study objective reading one (``tail:length/...``): a dashboard panel, a regime gate, a rename."""
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        text = _text(node)
        if text is None or id(node) in inside_fstring:
            continue
        objective = OBJECTIVE.match(text)
        key = objective.group(1) if objective else text
        if KEY_SHAPE.match(key) and key.split("/")[0] in NAMESPACES:
            found.append((node, key))
    return found


def covered(key: str) -> bool:
    """A record covers the key; an f-string's ``<x>`` parts may stand for any text."""
    if "<x>" not in key:
        return lookup(key) is not None
    if lookup(key.replace("<x>", "x")) is not None:
        return True
    wild = re.compile("^" + re.escape(key).replace("<x>", ".+") + "$")
    return any(wild.match(VARIABLE.sub("x", m.name)) for m in CATALOG)


def uncovered_keys(package: Path = PACKAGE) -> list[str]:
    """'path:line: key' for every key the package writes or names that no record covers."""
    out = set()
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "tracking" and path.name in CATALOG_FILES:
            continue
        tree = ast.parse(path.read_text())
        for node, key in _written(tree) + _named(tree):
            if not covered(key):
                out.add(f"{path.relative_to(package.parent)}:{node.lineno}: {key}")
    return sorted(out)


def test_every_key_the_package_logs_is_in_the_catalog():
    found = uncovered_keys()
    assert not found, ("keys the package logs that no record of grpolab.tracking.metric_catalog covers "
                       "(add a Metric to tracking/metric_entries*.py):\n" + "\n".join(found))


def test_the_lint_names_a_key_missing_from_the_catalog(tmp_path):
    copy = tmp_path / "grpolab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    loss = copy / "algorithms" / "surrogates.py"
    loss.write_text(loss.read_text() + '\n\ndef _made_up(stats):\n    stats["clip/made_up_fraction"] = 0.0\n')
    times = copy / "trainer" / "step_times.py"
    times.write_text(times.read_text() + '\n\ndef _made_up(self):\n'
                     '    self._metrics["train"]["made_up_s"].append(1.0)\n')
    found = uncovered_keys(copy)
    assert [f.rsplit(": ", 1)[1] for f in found] == ["clip/made_up_fraction", "made_up_s"], found
    assert found[0].startswith("grpolab/algorithms/surrogates.py:")


def test_the_lint_sees_the_logging_paths():
    """Keys from each logging path are found, so a new key on any of them is checked."""
    seen = set()
    for path in PACKAGE.rglob("*.py"):
        seen |= {key for _, key in _written(ast.parse(path.read_text()))}
    assert {"reward/mean", "trained/<x>", "entropy_coef", "cispo_clip_ratio", "time/scoring_s", "episode/turns",
            "anchor/groups_size_<x>", "length/truncated_salvageable", "sampling/rounds", "critic/warmup"} <= seen


def test_metrics_doc_is_generated_from_the_catalog():
    doc = (REPO / "docs" / "metrics.md").read_text()
    assert doc == render_doc(), "docs/metrics.md is stale: run `grpolab metrics-doc > docs/metrics.md`"
    row = "| `groups/zero_variance` | generated | group | [0, 1] | `frac_reward_zero_std` | every run (required) |"
    assert row in doc


def test_records_are_unique_and_well_formed():
    names = [m.name for m in CATALOG]
    assert len(names) == len(set(names))
    for m in CATALOG:
        assert m.range[0] <= m.range[1] and m.definition and m.weighting, m.name
        assert m.population in {"generated", "trained", "held-out", "benchmark", "run", "machine"}, m.name
    assert set(required_keys()) <= {m.name for m in CATALOG if m.stored and not m.is_family}


def test_the_readers_get_the_values_their_own_tables_held():
    from grpolab.report.layout import DEFAULT_LAYOUT
    from grpolab.studies.objectives import metric_range
    from grpolab.tracking.recorder import DROPPED, stored_name
    from grpolab.trainer.loss_stats import PER_HIGH_CLIPPED, PER_MICRO_BATCH
    assert set(required_keys()) == {
        "reward/mean", "accuracy", "entropy", "length/mean", "length/correct", "length/incorrect",
        "length/truncated_fraction", "length/std", "length/soft_penalized_fraction", "clip/low_fraction",
        "clip/high_fraction", "clip/region_fraction", "groups/zero_variance", "groups/all_correct", "groups/all_wrong",
        "tokens/cumulative", "step_time", "time/generation_s", "time/scoring_s", "time/update_s",
        "time/generated_tokens_per_s", "time/accelerator_hours", "override/advantage", "override/loss",
        "eval/pass_at_1", "eval/pass_at_k", "eval/greedy_accuracy"}
    assert PER_MICRO_BATCH == {"dpo/pairs", "critic/warmup"} and PER_HIGH_CLIPPED == {"clip/high_old_prob"}
    assert DROPPED == {"frac_reward_zero_std", "reward", "reward_std", "num_tokens", "epoch", "train_runtime",
                       "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss",
                       "policy_loss", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                       "clip_ratio/low_min", "clip_ratio/high_max", "cispo_clip_ratio"}
    assert stored_name("completions/mean_length") is None
    assert stored_name("eval/aime24/avg@32") == "eval/aime24/avg_at_32"
    assert DEFAULT_LAYOUT["panels"][0] == {"title": "Held-out pass@1", "metric": "eval/pass_at_1"}
    assert DEFAULT_LAYOUT["panels"][-1] == {"title": "KL to the reference", "metric": "kl"}
    assert metric_range("final:eval/pass_at_1") == (0.0, 1.0) and metric_range("tail:clip/high_fraction") == (0.0, 1.0)
    assert metric_range("auc:eval/math500/maj@4") == (0.0, 1.0)
    assert metric_range("final:eval/aime24/sd@32") == (0.0, math.inf)
    assert metric_range("steps_to:eval/pass_at_1>=0.3") == (0.0, math.inf) == metric_range("tail:length/incorrect")
    assert metric_range("tail:loss") == (-math.inf, math.inf) == range_of("made/up")
    assert trl_mirror("clip/low_fraction") == "clip_ratio/low_mean" and trl_mirror("accuracy") == ""
    assert lookup("rewards/overlong/failure_rate").range == (0.0, 1.0) and lookup("eval/x/y") is None
