"""What one coordinator run is asked to do: the study, read once by whoever starts the run, and
how to run it. The front doors (``grpolab study``, the Python API, ``verdicts``, the seeds-until-
decided driver) build one and hand it down; nothing below them reads the study file again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpolab.studies.definition import StudyConfig, load_study
from grpolab.studies.time_limit import TimeLimit

# publish(state, parent_run_id, study_path, storage_url): what the front door records on the parent run
Publish = Callable[[Path, str, str, "str | None"], None]


@dataclass(frozen=True)
class StudyRun:
    """``study``: the loaded study file, as written (seeds added on demand are the storage's,
    read by the coordinator). ``workers``: processes on this machine (None: 1, or pool // K with
    ``gpus_per_row`` K). ``publish``: called once this run's rows are done, before the parent run
    closes (the front door passes the report's table publisher: the study driver never imports
    reporting, as Optuna's ``optimize`` takes ``callbacks=``). ``launcher`` (slurm.SlurmLauncher):
    the workers run as cluster jobs. ``devices``/``accelerate_config``: studies/devices.py and
    launch_options.py. ``time_limit`` (studies/time_limit.py): no row starts that is expected to
    end past it; None: no limit."""
    study: StudyConfig
    state: Path
    storage_url: str | None = None
    workers: int | None = None
    retry_failed: bool = False
    accept_changed: bool = False
    echo: Callable[[str], None] = print
    publish: Publish | None = None
    gpus_per_row: int | None = None
    devices: str | None = None
    launcher: object | None = None
    accelerate_config: str | None = None
    time_limit: TimeLimit | None = None

    @classmethod
    def of(cls, path, state, **how) -> StudyRun:
        """The run of the study file at ``path`` (read here, once), into the state folder ``state``."""
        return cls(load_study(str(path)), Path(state), **how)

    @property
    def path(self) -> str:
        return self.study.path
