"""The episode-normalisation axis as one registry: over which population GiGPO's episode-level
advantage A^E takes its group mean and std (``method.episode_norm``), on multi-turn episodes.

An entry says its formula and source, whether it counts an episode once per turn (``per_turn``:
it recomputes A^E from the episode returns, so it needs a multi-turn environment task, an
estimator with a step-level normaliser and returns that are the whole reward: ``spec`` and
``envs.episode_task`` refuse the rest), and how stock TRL 1.16 stands to it. The setting is logged when
away from its default (``tracking.naming``). Its function is attached by name one floor up
(``grpolab.algorithms.gigpo.EPISODE_NORM_FUNCTIONS``) and called by ``compute_advantages`` on
multi-turn episodes (``gigpo.episode_advantages``). Adding a population: one entry here, its function, and its
test. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeNorm:
    """One value of ``episode_norm``. Formula: the docstring of its function in ``grpolab.algorithms.gigpo``."""
    name: str
    formula: str
    source: str
    per_turn: bool = False            # counts episode i T_i times (its turns): recomputes A^E from the returns
    needs: str | None = None          # what the run must have (None: nothing)
    trl: str | None = None            # how TRL 1.16 computes the same (None: it cannot)
    no_trl: str | None = None         # why TRL has none (None when ``trl`` says)


_GIGPO = "Feng et al. 2025, GiGPO, arXiv:2505.10978"
EPISODE_NORMS: dict[str, EpisodeNorm] = {n.name: n for n in (
    EpisodeNorm("episode", "mean_g, std_g over the G episodes of a group, each once", f"{_GIGPO}, eq. 3",
                trl="rollout_func with one row per episode: TRL's group mean/std of the episode rewards"),
    EpisodeNorm("step", "mean_g = sum T_i R_i / sum T_i, std_g weighted alike: episode i once per turn",
                "verl-agent gigpo/core_gigpo.py (episode_norm_reward, compute_mean_std_cross_steps=True)",
                per_turn=True, needs="a multi-turn environment task (task.name: an environment), an advantage "
                                     "with a step-level normaliser, no reward-side KL and no reward_weights",
                no_trl="TRL 1.16 counts each row once and has no turns"),
)}
