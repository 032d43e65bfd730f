import os
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("MLFLOW_TRACKING_URI", None)  # tests always use their own embedded store
warnings.filterwarnings("ignore", category=FutureWarning)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A randomly initialised tiny preset saved to disk (TRL re-loads the reference from it)."""
    from grpolab.world.models import build_model, save_model
    path = tmp_path_factory.mktemp("tiny-model")
    save_model(*build_model("tiny", 0), path)
    return path


@pytest.fixture(scope="session")
def shared_state(tmp_path_factory):
    """One state folder for the session, so the warm start is trained once and reused."""
    path = tmp_path_factory.mktemp("state")
    os.environ["GRPOLAB_STATE"] = str(path)
    return path


def tiny_dataset(n=64):
    import datasets
    from grpolab.world.tasks import make_task
    task = make_task("addition", digits=2)
    train, _ = task.splits(0, n, 8)
    return task, train, datasets.Dataset.from_dict({"prompt": [e.prompt for e in train], "idx": list(range(len(train)))})
