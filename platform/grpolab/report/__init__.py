"""Rendering: text/CSV/LaTeX tables, figures, HTML pages, dashboards, the verdict page, and
publishing tables and dashboards to a study's MLflow parent run."""
