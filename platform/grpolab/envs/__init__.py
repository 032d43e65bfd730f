"""Multi-turn environments: the interface (base.py), the shipped grid world, episodes with a
local model (rollout.py) and the task kind experiments name (episode_task.py)."""

from grpolab.envs.base import EnvContractError, Environment, Episode, checked_step  # noqa: F401
from grpolab.envs.episode_task import ENVS, EpisodeTask, make_env_task  # noqa: F401


