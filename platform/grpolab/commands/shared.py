"""Flags and look-ups several commands share, declared once."""

from __future__ import annotations

STORAGE_HELP = ("Optuna storage URL (default: journal file in the state folder; postgresql://... to share rows "
                "with workers on other machines)")


def storage_flag(parser, required: bool = False) -> None:
    """``--storage URL``: where a study's rows are (study, study-worker, table, samples, dashboard,
    verdicts, eval)."""
    parser.add_argument("--storage", required=required, default=None, help=STORAGE_HELP)


def sequential_flags(parser, what: str) -> None:
    """``--until-decided [--max-seeds N] [--batch B]``: seeds on demand (study, verdicts)."""
    parser.add_argument("--until-decided", action="store_true",
                        help=f"add paired seeds in batches until {what} is decided or --max-seeds is reached "
                             "(each look's interval at level 1 - 0.05/K over the K planned looks)")
    parser.add_argument("--max-seeds", type=int, default=None, help="with --until-decided: the most paired seeds")
    parser.add_argument("--batch", type=int, default=None,
                        help="with --until-decided: seeds added per look (default: the study file's, else 2)")


def at_least(flag: str, value, least) -> None:
    """Refuse a count below its floor, naming the flag."""
    from grpolab.errors import ConfigError
    if value is not None and value < least:
        raise ConfigError(f"{flag}: must be >= {least}, got {value}")


def parent_run_id(study, state, storage_url) -> str | None:
    """The MLflow parent run of a loaded study (``StudyConfig``), from its Optuna storage."""
    from grpolab.studies.rows import PARENT_RUN_ATTR
    from grpolab.studies.storage import create_or_load, default_storage
    return create_or_load(study, storage_url or default_storage(state)).user_attrs.get(PARENT_RUN_ATTR)


def check_stores(state, storage_url: str | None) -> None:
    """Fail fast on an unreachable or misconfigured ``$MLFLOW_TRACKING_URI`` or ``--storage`` URL
    (exit 75 or 2 in seconds, one line: stores.check_stores; a missing database driver is bad
    input) before a command reads MLflow, whose client retries for minutes."""
    from grpolab.state import state_path
    from grpolab.tracking.stores import check_stores as check
    check(state_path(state), storage_url)
