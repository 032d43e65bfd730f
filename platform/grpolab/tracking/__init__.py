"""MLflow: what a run is called and which params and tags it logs (naming, no MLflow import),
the recorder that streams metrics, the tracking and artifact stores, and per-run figures."""
