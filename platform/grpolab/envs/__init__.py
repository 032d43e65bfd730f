"""Multi-turn environments: the interface (base.py), the shipped grid world, episodes with a
local model (rollout.py) and the task kind experiments name (task.py)."""

from .base import EnvContractError, Environment, Episode, checked_step  # noqa: F401
from .task import ENVS, EpisodeTask, make_env_task  # noqa: F401


def is_episode_task(task) -> bool:
    return isinstance(task, EpisodeTask)
