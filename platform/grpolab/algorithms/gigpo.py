"""GiGPO's two-level advantage for multi-turn episodes. Pure python/torch, no TRL.

Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv:2505.10978.
Notation: an episode group holds the G episodes that start from the same initial state (one
prompt, one environment seed); episode i takes actions a_1..a_{T_i} in states s_1..s_{T_i} and
receives step rewards r_1..r_{T_i}.

Detail: docs/methods.md, "grpolab.algorithms.gigpo".
"""

from __future__ import annotations

from collections import Counter
from difflib import SequenceMatcher
from typing import Callable, NamedTuple

import torch

from grpolab.algorithms.registrar import registrar
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.episode_norms import EPISODE_NORMS

# anchor-group size buckets for the size-distribution curves: (label, smallest, largest)
SIZE_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3to4", 3, 4), ("5to8", 5, 8), ("over8", 9, None))


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """Eq. 5: R_t = r_t + gamma * R_{t+1}, with R after the last step 0."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def _hashable(key, where: str):
    try:
        hash(key)
    except TypeError:
        raise ValueError(f"anchor state of {where} is not hashable ({type(key).__name__} {key!r}); an environment "
                         "must return a str, number or tuple as state_key") from None
    return key


def anchor_groups(state_keys: list[list], group_size: int, similarity: float = 1.0) -> list[list[int]]:
    """Eq. 6: a step-group id for every (episode, step), groups never crossing episode groups.

    state_keys[i][t] is the state episode i acted in at step t; episodes i // group_size share an
    initial state. similarity = 1 groups equal keys (hashable); similarity < 1 groups text states
    whose difflib ratio to a group's first state is >= similarity (first match wins, in order)."""
    if len(state_keys) % group_size:
        raise ValueError(f"{len(state_keys)} episodes do not split into groups of {group_size}")
    ids, next_id = [], 0
    for g in range(len(state_keys) // group_size):
        exact: dict = {}
        similar: list[tuple[str, int]] = []
        for i in range(g * group_size, (g + 1) * group_size):
            row = []
            for t, key in enumerate(state_keys[i]):
                where = f"episode {i} step {t}"
                if similarity >= 1.0:
                    key = _hashable(key, where)
                    if key not in exact:
                        exact[key], next_id = next_id, next_id + 1
                    row.append(exact[key])
                    continue
                if not isinstance(key, str):
                    raise ValueError(f"anchor state of {where}: method.anchor_similarity < 1 compares text states, "
                                     f"got {type(key).__name__}; return str state keys or set anchor_similarity: 1")
                match = next((gid for rep, gid in similar if SequenceMatcher(None, rep, key).ratio() >= similarity), None)
                if match is None:
                    similar.append((key, next_id))
                    match, next_id = next_id, next_id + 1
                row.append(match)
            ids.append(row)
    return ids


def step_advantages(step_returns: list[list[float]], group_ids: list[list[int]], std_norm: bool,
                    eps: float = 1e-4, unbiased: bool = True) -> list[list[float]]:
    """Eq. 7: (R_t - mean of its step group) [/ (std of its step group + eps)]; singletons 0."""
    members: dict[int, list[float]] = {}
    for rets, gids in zip(step_returns, group_ids):
        for r, gid in zip(rets, gids):
            members.setdefault(gid, []).append(float(r))
    stats = {}
    for gid, values in members.items():
        v = torch.tensor(values, dtype=torch.float64, device="cpu")   # host floats in, host floats out
        std = v.std(unbiased=unbiased).item() if len(values) > 1 else 0.0
        stats[gid] = (v.mean().item(), std + eps if std_norm else 1.0)
    def scaled(r: float, gid: int) -> float:   # equal returns (or eps = 0 on a zero std): no signal, 0
        mean, denom = stats[gid]
        return (r - mean) / denom if denom > 0 else 0.0
    return [[scaled(r, gid) for r, gid in zip(rets, gids)] for rets, gids in zip(step_returns, group_ids)]


def step_row_episode_advantages(episode_returns: list[float], turns: list[int], group_size: int, std_norm: bool,
                                eps: float = 1e-4, unbiased: bool = True) -> torch.Tensor:
    """Eq. 3 over step rows (``method.episode_norm: step``, verl-agent's default): in each episode
    group, mean_g and std_g count episode i once per turn (T_i = turns[i]),
        mean_g = sum T_i R_i / sum T_i,  std_g^2 = sum T_i (R_i - mean_g)^2 / (sum T_i - 1 [unbiased] or sum T_i);
    A^E_i = (R_i - mean_g) [/ (std_g + eps)]. An episode of 0 turns has no row and weight 0."""
    if len(episode_returns) != len(turns) or len(turns) % group_size:
        raise ValueError(f"{len(episode_returns)} returns, {len(turns)} turn counts: not groups of {group_size}")
    R = torch.tensor(episode_returns, dtype=torch.float64, device="cpu").view(-1, group_size)   # host lists in
    T = torch.tensor(turns, dtype=torch.float64, device="cpu").view(-1, group_size)
    rows = T.sum(1, keepdim=True)
    mean = (T * R).sum(1, keepdim=True) / rows.clamp(min=1)
    if not std_norm:
        return (R - mean).flatten().float()
    var = (T * (R - mean) ** 2).sum(1, keepdim=True) / (rows - 1 if unbiased else rows).clamp(min=1)
    denom = var.sqrt() + eps
    scaled = torch.where(denom > 0, (R - mean) / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(R))
    return scaled.flatten().float()


def token_advantages(episode_adv: torch.Tensor, step_adv: list[list[float]], turn_index: torch.Tensor,
                     omega: float) -> torch.Tensor:
    """Eq. 8 per token: A_it = A^E_i + omega * A^S_{i, turn(t)} on model tokens (turn_index >= 0),
    0 on environment and padding tokens (turn_index = -1). Returns (N, T) like ``turn_index``."""
    N, T = turn_index.shape
    width = max((len(row) for row in step_adv), default=0) + 1
    table = torch.zeros(N, width, dtype=torch.float32, device=turn_index.device)   # column width-1 stays 0: where turn -1 points
    for i, row in enumerate(step_adv):
        if row:
            table[i, :len(row)] = torch.tensor(row, dtype=torch.float32, device=table.device)
    model = turn_index >= 0
    per_token = torch.gather(table, 1, torch.where(model, turn_index, torch.full_like(turn_index, width - 1)).long())
    return torch.where(model, episode_adv.view(-1, 1).float() + omega * per_token, torch.zeros_like(per_token))


def anchor_metrics(group_ids: list[list[int]]) -> dict[str, float]:
    """Anchor-group curves: mean step-group size, number of groups, fraction of steps in
    singleton groups, and the fraction of groups per size bucket."""
    sizes = Counter(gid for row in group_ids for gid in row)
    if not sizes:
        return {}
    n_groups, n_steps = len(sizes), sum(sizes.values())
    out = {"anchor/groups": float(n_groups), "anchor/group_size_mean": n_steps / n_groups,
           "anchor/singleton_step_fraction": sum(1 for s in sizes.values() if s == 1) / n_steps}
    for label, low, high in SIZE_BUCKETS:
        out[f"anchor/groups_size_{label}"] = sum(1 for s in sizes.values()
                                                 if s >= low and (high is None or s <= high)) / n_groups
    return out


class EpisodeBatch(NamedTuple):
    """What an episode-level population reads besides the method's own A^E."""
    returns: list[float]     # R_i, each episode's total reward
    turns: list[int]         # T_i
    group_size: int
    std_norm: bool           # the estimator divides by the group's std (its step_norm)
    eps: float
    unbiased: bool


EPISODE_NORM_FUNCTIONS: dict[str, Callable] = {}
register_episode_norm = registrar(EPISODE_NORMS, EPISODE_NORM_FUNCTIONS, "episode norm", "EPISODE_NORMS")


@register_episode_norm("episode")
def episode_population(episode_adv: torch.Tensor, batch: EpisodeBatch) -> torch.Tensor:
    """Eq. 3 over the G episodes, each once: the method's estimator on the episode returns, as it is."""
    return episode_adv


@register_episode_norm("step")
def step_population(episode_adv: torch.Tensor, batch: EpisodeBatch) -> torch.Tensor:
    """Eq. 3 over step rows: ``step_row_episode_advantages`` (episode i counted T_i times)."""
    return step_row_episode_advantages(batch.returns, batch.turns, batch.group_size, std_norm=batch.std_norm,
                                       eps=batch.eps, unbiased=batch.unbiased).to(episode_adv.device)


class Episodes(NamedTuple):
    """A batch of multi-turn episodes, one per row (groups of the batch's group size contiguous), as
    GiGPO's episode and step levels read them (``AdvantageInputs.episodes``)."""
    step_rewards: list[list[float]]   # r_1..r_{T_i} of episode i: R_i is their sum, T_i their number
    anchor_ids: list[list[int]]       # the step group of each (i, t) (``anchor_groups``)
    turn_index: torch.Tensor | None = None   # (N, T) the turn of each completion token, -1 on environment and
                                             # padding tokens; only the step term reads it (None without one)

    def returns(self) -> list[float]:
        return [float(sum(rewards)) for rewards in self.step_rewards]

    def turns(self) -> list[int]:
        return [len(rewards) for rewards in self.step_rewards]


def episode_advantages(spec, episode_adv: torch.Tensor, episodes: Episodes, group_size: int) -> torch.Tensor:
    """The advantages of multi-turn episodes from the estimator's A^E of their returns: A^E over the
    population ``spec.episode_norm`` names (``EPISODE_NORM_FUNCTIONS``), and with ``spec.step_omega``
    > 0 the per-token A^E_i + omega * A^S_{i, turn(t)} (Eq. 8; A^S: Eq. 5 returns discounted by
    ``step_gamma``, normalised within their anchor groups as the estimator's entry says, Eq. 7),
    (N, T) like ``episodes.turn_index``. A per-token estimator's (N, T) advantages (the tool-turn
    optimal token baseline) have no step-level term (its entry has no ``step_norm``; spec.py refuses
    the step term and a per-turn population without one): they pass through as they are."""
    if episode_adv.dim() not in (1, 2) or episode_adv.shape[0] != len(episodes.step_rewards):
        raise ValueError(f"{episode_adv.shape[0]} advantages for {len(episodes.step_rewards)} episodes")
    std_norm, eps, unbiased = ADVANTAGES[spec.advantage].step_norm == "std", spec.adv_eps, spec.std_unbiased
    # the population of A^E's mean and std (check_episode_config guards the reward a per-turn one recomputes)
    episode_adv = EPISODE_NORM_FUNCTIONS[spec.episode_norm](episode_adv, EpisodeBatch(
        episodes.returns(), episodes.turns(), group_size, std_norm=std_norm, eps=eps, unbiased=unbiased))
    if spec.step_omega == 0 or episode_adv.dim() == 2:
        return episode_adv
    if episodes.turn_index is None:
        raise ValueError(f"step_omega={spec.step_omega:g}: GiGPO's step term needs the turn of each completion token "
                         "(Episodes.turn_index)")
    returns = [discounted_returns(rewards, spec.step_gamma) for rewards in episodes.step_rewards]
    step_adv = step_advantages(returns, episodes.anchor_ids, std_norm=std_norm, eps=eps, unbiased=unbiased)
    # the step term is built where turn_index is (the CPU: a table of host floats), then moved to A^E's device
    per_token = token_advantages(episode_adv.to(episodes.turn_index.device), step_adv, episodes.turn_index,
                                 spec.step_omega)
    return per_token.to(episode_adv.device)
