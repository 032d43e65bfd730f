"""What a study's parent MLflow run holds besides its children: the results table (markdown and
CSV, as ``table.md`` / ``table.csv``), the study file (logged when the parent is created) and the
dashboard HTML (``dashboard.html``), so that the stock MLflow UI shows a study's outcome on the
parent run itself.

They are (re)written whenever they are (re)made: the tables at the end of every ``grpolab
study`` that ran rows, the dashboard when such a study has finished all its rows, and both by
``grpolab table`` / ``grpolab dashboard`` on the study (overwriting the parent's copies, so the
parent shows the latest view: e.g. after ``--retry-failed`` rows were added). Dashboards other
than the standard view (another layout, x-axis or seed view) go to ``dashboards/<page>.html``.
``grpolab eval`` on a study (ladder or search) puts the table and a page of each score it
re-scored in ``rescored/<metric>/`` (publish_rescored).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from grpolab.errors import ConfigError
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


def rescored_metrics(results, overrides: dict) -> list[str]:
    """The re-scored metric (``analysis.rescored``) of each benchmark ``grpolab eval`` just scored:
    the final models' avg@n, qualified by the settings the command gave, so the table reads this
    re-scoring rather than another of the same benchmark."""
    from grpolab.analysis.rescored import parse_rescored
    keys = sorted({k for r in results for k in r.metrics if re.fullmatch(r"eval/[^/]+/avg_at_[0-9]+", k)})
    quals = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted((overrides or {}).items())
                     if v is not None and k != "n")   # n is in the key
    return [parse_rescored(f"rescored{f'[{quals}]' if quals else ''}:{key}").label for key in keys]


def rescored_folder(metric: str) -> str:
    """``rescored/<metric as one path part>``: where a re-scored metric's pages go on the parent run."""
    return "rescored/" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", metric).strip("_")


def publish_rescored(state: Path, target: str, results, overrides: dict, storage_url: str | None,
                     echo=print) -> list[str]:
    """After ``grpolab eval`` on a study, a ladder or a search: each re-scored metric's table
    (``table.md`` / ``table.csv``, as ``grpolab table STUDY --metric METRIC`` prints them) and a page
    of it (``dashboard.html``) in ``rescored_folder(METRIC)`` on the study's parent run, as a finished
    study's own are put there; the same metric again replaces them. A table that cannot be made yet
    (a ladder's rows not re-scored) is said, not put."""
    from grpolab.analysis.ablation import load_results
    from grpolab.studies.rows import PARENT_RUN_ATTR
    if not Path(target).is_file() or not results:
        return []
    cfg, study = load_results(target, state, storage_url, create=False)
    parent = study.user_attrs.get(PARENT_RUN_ATTR) if study is not None else None
    if parent is None:
        return []
    client, done = client_for(state), []
    for metric in rescored_metrics(results, overrides):
        try:
            pages = {name: rescored_page(state, target, storage_url, metric, fmt)
                     for name, fmt in (("table.md", "markdown"), ("table.csv", "csv"))}
            pages["dashboard.html"] = rescored_page(state, target, storage_url, metric, "html", pages["table.md"])
        except ConfigError as exc:
            echo(f"{metric}: not put on the study's parent run {parent}: {exc}")
            continue
        for name, text in pages.items():
            client.log_text(parent, text, f"{rescored_folder(metric)}/{name}")
        echo(f"{metric}: table.md, table.csv and dashboard.html in {rescored_folder(metric)}/ on the study's "
             f"MLflow parent run {parent}")
        done.append(metric)
    return done


def rescored_page(state: Path, study_path: str, storage_url: str | None, metric: str, fmt: str,
                  markdown: str = "") -> str:
    """The re-scored table as ``grpolab table`` prints it (markdown, csv), or an HTML page of it (html):
    a ladder's rung means with their intervals and paired deltas, a search's trials' re-scored values
    against their training-time objective, and ``markdown`` (the printed table) as text."""
    from grpolab.report.tables import study_table
    if fmt != "html":
        return study_table(study_path, state, storage_url, fmt, metric)
    import html

    from grpolab.analysis.ablation import load_results
    from grpolab.analysis.rescored import parse_rescored
    from grpolab.report.figures import ablation_figure, paired_delta_figure, rescored_trials_figure
    from grpolab.report.page import render_page
    from grpolab.report.tables import rescored_search_view, rescored_view
    cfg, study = load_results(study_path, state, storage_url)
    if not cfg.study_kind.paired_rungs:
        picked = rescored_search_view(cfg, study, state, storage_url, metric)
        sections = [("Re-scored trials", rescored_trials_figure(picked.frame, parse_rescored(metric).label,
                                                                picked.beside))]
    else:
        (frame, _, level), _ = rescored_view(cfg, study, state, storage_url, metric)
        shown = f"final:{parse_rescored(metric).key}"   # its range and label on the charts
        sections = [("Re-scored ablation", ablation_figure(frame, shown, cfg.published_source))]
        if len(frame) > 1:
            sections.append(("Paired delta vs previous rung", paired_delta_figure(frame, shown, level)))
    table = f"<h2>{html.escape(metric)}</h2><pre>{html.escape(markdown)}</pre>"
    return render_page(f"grpolab study: {cfg.name}, re-scored {metric}", sections, [], [table])
