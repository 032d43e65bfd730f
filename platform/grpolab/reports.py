"""What a study's parent MLflow run holds besides its children: the results table (markdown and
CSV, as ``table.md`` / ``table.csv``), the study file (logged when the parent is created) and the
dashboard HTML once one is built (``dashboard.html``), so that the stock MLflow UI shows a study's
outcome on the parent run itself."""

from __future__ import annotations

from pathlib import Path

from .tracking import client_for


def record_study_tables(state: Path, parent_run_id: str, study_path: str, storage_url: str | None) -> None:
    from .study_tables import study_table
    client = client_for(state)
    for fmt, name in (("markdown", "table.md"), ("csv", "table.csv")):
        client.log_text(parent_run_id, study_table(study_path, state, storage_url, fmt), name)


def attach_dashboard(state: Path, parent_run_id: str, html_path: Path) -> None:
    """Copy a built dashboard onto the parent run (as ``dashboard.html``, plus its plotly.js
    when the page loads a shared local copy)."""
    client = client_for(state)
    page = Path(html_path).read_text()
    client.log_text(parent_run_id, page, "dashboard.html")
    for script in Path(html_path).parent.glob("plotly-*.min.js"):
        if script.name in page:
            client.log_artifact(parent_run_id, str(script))
