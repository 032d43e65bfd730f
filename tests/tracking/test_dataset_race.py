"""Two workers logging the same dataset into one experiment at once (a 2-worker study: both rows
train on the same prompts) must both succeed: MLflow's store checks for the dataset, then inserts
it, and the loser of the race hits the unique constraint (measured: a trial failed with
``UNIQUE constraint failed: datasets.experiment_id, datasets.name, datasets.digest``)."""

import threading
from types import SimpleNamespace

from mlflow.tracking import MlflowClient

from grpolab.tracking.recorder import RunRecorder


def test_concurrent_runs_log_the_same_dataset_once_each(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    setup = MlflowClient(uri)
    experiment = setup.create_experiment("race", artifact_location=(tmp_path / "artifacts").as_uri())
    runs = [setup.create_run(experiment).info.run_id for _ in range(6)]
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(50)]
    barrier, errors = threading.Barrier(len(runs)), []

    def log(run_id: str) -> None:
        recorder = SimpleNamespace(client=MlflowClient(uri), run_id=run_id)
        barrier.wait()
        try:
            RunRecorder.log_dataset(recorder, "addition-train", rows, "training", {"grpolab.task": "addition"})
        except Exception as exc:   # noqa: BLE001 -- collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=log, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    digests = set()
    for run_id in runs:
        inputs = setup.get_run(run_id).inputs.dataset_inputs
        assert [i.dataset.name for i in inputs] == ["addition-train"]
        assert [t.value for t in inputs[0].tags if t.key == "mlflow.data.context"] == ["training"]
        digests.add(inputs[0].dataset.digest)
    assert len(digests) == 1   # one dataset, linked to every run
