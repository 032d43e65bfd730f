"""What a study's parent MLflow run holds besides its children: the results table (markdown and
CSV, as ``table.md`` / ``table.csv``), the study file (logged when the parent is created) and the
dashboard HTML (``dashboard.html``), so that the stock MLflow UI shows a study's outcome on the
parent run itself.

They are (re)written whenever they are (re)made: the tables at the end of every ``grpolab
study`` that ran rows, the dashboard when such a study has finished all its rows, and both by
``grpolab table`` / ``grpolab dashboard`` on the study (overwriting the parent's copies, so the
parent shows the latest view: e.g. after ``--retry-failed`` rows were added). Dashboards other
than the standard view (another layout, x-axis or seed view) go to ``dashboards/<page>.html``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from grpolab.tracking.recorder import client_for

log = logging.getLogger(__name__)
STANDARD_DASHBOARD = "dashboard.html"


def record_study_tables(state: Path, parent_run_id: str, study_path: str, storage_url: str | None) -> None:
    """The end of a study that ran rows: the tables, and the dashboard once every row is done. A page
    that cannot be built raises after its warning, so the study's next run builds it again."""
    publish_tables(state, parent_run_id, study_path, storage_url)
    if study_finished(study_path, state, storage_url) and \
            publish_standard_dashboard(state, parent_run_id, study_path, storage_url) is None:
        raise RuntimeError("the study's dashboard was not built (see the warning above)")


def publish_tables(state: Path, parent_run_id: str, study_path: str, storage_url: str | None) -> None:
    from grpolab.report.tables import study_table
    client = client_for(state)
    for fmt, name in (("markdown", "table.md"), ("csv", "table.csv")):
        client.log_text(parent_run_id, study_table(study_path, state, storage_url, fmt), name)


def study_finished(study_path: str, state: Path, storage_url: str | None) -> bool:
    """Every ladder row (or every search trial) has completed."""
    import time

    from grpolab.analysis.ablation import load_results
    from grpolab.studies.rows import progress
    cfg, study = load_results(study_path, state, storage_url)
    done = progress(study, cfg, time.time(), 1)
    return done["done"] >= done["total"]


def publish_standard_dashboard(state: Path, parent_run_id: str, study_path: str, storage_url: str | None) -> Path | None:
    """Build the study's standard dashboard into ``<state>/dashboards`` and put it on the parent
    run. A page that cannot be built is reported (warning) and leaves the study's result alone."""
    from grpolab.report.dashboard import build_dashboard, default_output_name
    try:
        page = build_dashboard(state, Path(state) / "dashboards" / default_output_name(study_path, None, None),
                               study_path, storage_url=storage_url)
        attach_dashboard(state, parent_run_id, page)
        return page
    except Exception as exc:  # noqa: BLE001 - the rows and tables are recorded; the page can be rebuilt
        log.warning("the study's dashboard was not put on its MLflow parent run %s (%s: %s); "
                    "`grpolab dashboard %s` builds it", parent_run_id, type(exc).__name__, exc, study_path)
        return None


def dashboard_artifact_name(study_path: str, layout: str | None, x: str | None, seeds: str | None) -> str:
    """``dashboard.html`` for the study's standard view, ``dashboards/<page>.html`` for another."""
    from grpolab.report.dashboard import default_output_name
    view = default_output_name(study_path, None, layout, x or "steps", seeds or "band")
    return STANDARD_DASHBOARD if view == default_output_name(study_path, None, None) else f"dashboards/{view}"


def attach_dashboard(state: Path, parent_run_id: str, html_path: Path, name: str = STANDARD_DASHBOARD) -> None:
    """Copy a built dashboard onto the parent run (as ``name``, plus its plotly.js beside it when
    the page loads a shared local copy)."""
    client = client_for(state)
    page = Path(html_path).read_text()
    client.log_text(parent_run_id, page, name)
    folder = str(Path(name).parent) if Path(name).parent != Path(".") else None
    for script in Path(html_path).parent.glob("plotly-*.min.js"):
        if script.name in page:
            client.log_artifact(parent_run_id, str(script), folder)
