"""Signals that end a run: kept apart from tracking so the CLI can import it without MLflow."""


class RunKilled(BaseException):
    """Raised from the SIGTERM handler so the run ends KILLED, not FAILED or RUNNING."""
