"""A shipped base model: one content digest for a model file or folder (checkable from a shell),
checked before a run starts, and the DAPO ladder's rows starting from the shipped files on any
CPU kernel path."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from grpolab.errors import ConfigError
from grpolab.experiment.config import load_experiment
from grpolab.experiment.model_files import check_model_digest, content_digest

LADDER = REPO / "studies" / "dapo_table1.yaml"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "B.bin").write_bytes(b"\x00\x01" * 1000)
    (folder / "a.txt").write_text("lower case sorts after upper case in byte order\n")
    (folder / "sub" / "x").write_text("nested")
    (folder / "with space's.json").write_text("{}")
    (folder / ".hidden").write_text("counted")
    (folder / "é.txt").write_text("UTF-8 name")
    return folder


def test_a_folders_digest_is_the_sha256sum_manifest_a_shell_computes(tmp_path):
    folder = _folder(tmp_path)
    shell = subprocess.run("find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum",
                           shell=True, cwd=folder, capture_output=True, text=True, check=True).stdout.split()[0]
    assert content_digest(folder) == shell
    assert content_digest(folder / "B.bin") == hashlib.sha256(b"\x00\x01" * 1000).hexdigest()
    before = content_digest(folder)
    (folder / "sub" / "x").write_text("nesteD")
    assert content_digest(folder) != before
    (folder / "sub" / "x").rename(folder / "sub" / "y")
    (folder / "sub" / "y").write_text("nested")
    assert content_digest(folder) != before, "a renamed file is another folder"


@pytest.mark.parametrize("odd, message", [
    (lambda f: (f / "link").symlink_to(f / "config.json"), "link is a symbolic link"),
    (lambda f: (f / "back\\slash").write_text("x"), "holds a backslash or newline"),
    (lambda f: [p.unlink() for p in f.rglob("*") if p.is_file()], "holds no file"),
])
def test_a_folder_the_manifest_cannot_state_plainly_is_refused_in_one_line(tmp_path, odd, message):
    folder = _folder(tmp_path)
    odd(folder)
    with pytest.raises(ConfigError, match=f"model.sha256: .*{message}"):
        check_model_digest(str(folder), "0" * 64)


def _smoke(overrides):
    return load_experiment(str(REPO / "experiments" / "smoke.yaml"), overrides)


def test_model_sha256_is_checked_before_the_run_and_names_both_digests(tiny_model_dir):
    digest = content_digest(tiny_model_dir)
    path = [f"model.path={tiny_model_dir}", "model.preset=null"]
    assert _smoke([*path, f"model.sha256={digest}"]).model.sha256 == digest
    other = "f" * 64
    with pytest.raises(ConfigError, match=f"has digest {digest}, not the declared {other}"):
        _smoke([*path, f"model.sha256={other}"])
    with pytest.raises(ConfigError, match="64 lowercase hex digits"):
        _smoke([*path, "model.sha256=ABC"])
    with pytest.raises(ConfigError, match="model.sha256: only with model.path"):
        _smoke([f"model.sha256={digest}"])


def test_a_warm_start_setting_beside_model_path_is_refused_not_inert(tiny_model_dir):
    path = [f"model.path={tiny_model_dir}", "model.preset=null"]
    for setting in ("warm_start.seed=1000", "warm_start.band=[0.1,0.5]", "warm_start.max_steps=10"):
        with pytest.raises(ConfigError, match=f"{setting.split('=')[0]}: a run from model.path .* no warm start"):
            _smoke([*path, setting])
    assert _smoke([*path, "warm_start.enabled=false"]).model.path == str(tiny_model_dir)


def test_the_ladder_declares_its_shipped_base_model_and_the_files_match():
    base = yaml.safe_load(LADDER.read_text())["base"]["model"]
    folder = REPO / base["path"]
    assert content_digest(folder) == base["sha256"]
    provenance = json.loads((folder / "base_model.json").read_text())
    assert provenance["warm_start_seed"] == 3000 and provenance["preset"] == "tiny"
    assert provenance["warm_start"]["band"][0] <= provenance["warm_start"]["pass@1"] <= provenance["warm_start"]["band"][1]


ROW_MODEL = """
import json, sys
from pathlib import Path
import torch
from grpolab.experiment.model_files import content_digest
from grpolab.experiment.starting_model import resolve_model
from grpolab.studies.definition import load_study, quiet_build
from grpolab.tasks import make_task
from grpolab.world.models import load_model


def first_row_model(ladder, state):
    study = load_study(ladder)
    cfg = quiet_build(study.rung_experiment(0, study.seeds[0]))
    task = make_task(cfg.task["name"], **{k: v for k, v in cfg.task.items() if k != "name"})
    folder, record = resolve_model(cfg, task, Path(state))
    model, tokenizer = load_model(folder)
    with torch.no_grad():
        logits = model(tokenizer(["12+34="], return_tensors="pt").input_ids).logits[0, -1]
    return {"capability": torch.backends.cpu.get_cpu_capability(), "folder": str(folder), "record": record,
            "digest": content_digest(folder), "logits": logits.tolist()}


if __name__ == "__main__":
    print(json.dumps(first_row_model(sys.argv[1], sys.argv[2])))
"""


def test_the_ladders_rows_start_from_the_shipped_files_on_another_cpu_kernel_path(tmp_path):
    """This process's kernel path against ATEN_CPU_CAPABILITY=default (no vector kernels) in a fresh
    one: both load the same shipped files (nothing is trained), and the base model's first logits
    agree to float32 rounding."""
    scope = {"__name__": "row_model"}
    exec(ROW_MODEL, scope)
    machine = scope["first_row_model"](str(LADDER), str(tmp_path / "state"))
    if machine["capability"] == "DEFAULT":
        pytest.skip("this machine's CPU has no vector kernels: no other kernel path to force")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", ROW_MODEL, str(LADDER), str(tmp_path / "state")], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    forced = json.loads(out.stdout.strip().splitlines()[-1])
    assert forced["capability"] == "DEFAULT", forced["capability"]
    declared = yaml.safe_load(LADDER.read_text())["base"]["model"]["sha256"]
    assert machine["digest"] == forced["digest"] == declared
    assert machine["record"] == forced["record"] == {"source": "path"}
    assert not (tmp_path / "state" / "models").exists(), "a row from the shipped model trains no warm start"
    assert max(abs(a - b) for a, b in zip(machine["logits"], forced["logits"])) < 1e-4


def test_the_ladders_caption_prints_its_base_model_with_the_sha256():
    from grpolab.report.ladder_caption import caption_head, ladder_caption
    from grpolab.studies.definition import load_study
    declared = yaml.safe_load(LADDER.read_text())["base"]["model"]
    head = caption_head(ladder_caption(load_study(LADDER), 0, None))
    assert head.splitlines()[0].endswith(f"; base model: {declared['path']} (sha256 {declared['sha256']})")
    own = load_study(REPO / "studies" / "clip_higher_entropy.yaml")
    assert "the warm start of seed 1000 (tiny preset), trained on each machine" in caption_head(ladder_caption(own, 0, None))


def test_the_checked_digest_is_recomputed_when_a_file_changes(tmp_path):
    """Every rung's config checks the digest; it is computed once per folder state, and again as
    soon as a file changes (same size, new content)."""
    folder = _folder(tmp_path)
    digest = content_digest(folder)
    check_model_digest(str(folder), digest)
    check_model_digest(str(folder), digest)
    (folder / "B.bin").write_bytes(b"\x01\x00" * 1000)
    with pytest.raises(ConfigError, match="not the declared"):
        check_model_digest(str(folder), digest)
