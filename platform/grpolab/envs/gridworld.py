"""A small text grid world the embedded character models learn in minutes on CPU.

The agent stands on a ``size`` x ``size`` grid and must reach a goal; both are drawn from the
reset seed. Observation ``a{x}{y}g{gx}{gy}:`` (agent, goal); action one character: ``u`` (y+1),
``d`` (y-1), ``r`` (x+1), ``l`` (x-1). Anything else, or a move into the border, leaves the agent
in place. Rewards: ``sparse`` gives 1 on reaching the goal and 0 otherwise; ``per_step`` also
charges ``step_penalty`` for every step that does not reach the goal. Positions recur across the
episodes of a group (same start and goal), so GiGPO's anchor groups are well populated.
"""

from __future__ import annotations

import random

ACTIONS = {"u": (0, 1), "d": (0, -1), "r": (1, 0), "l": (-1, 0)}


class GridWorld:
    def __init__(self, size: int = 4, reward: str = "sparse", step_penalty: float = 0.1):
        self.size, self.reward_mode, self.step_penalty = size, reward, step_penalty
        self.agent = self.goal = (0, 0)

    def reset(self, seed: int) -> str:
        rng = random.Random(f"gridworld-{self.size}-{seed}")
        cells = [(x, y) for x in range(self.size) for y in range(self.size)]
        self.agent, self.goal = rng.sample(cells, 2)
        return self.observation()

    def observation(self) -> str:
        return f"a{self.agent[0]}{self.agent[1]}g{self.goal[0]}{self.goal[1]}:"

    def state_key(self) -> tuple:
        return (*self.agent, *self.goal)

    def step(self, action: str) -> tuple[str, float, bool, tuple]:
        dx, dy = ACTIONS.get(action.strip(), (0, 0))
        x, y = self.agent[0] + dx, self.agent[1] + dy
        if 0 <= x < self.size and 0 <= y < self.size:
            self.agent = (x, y)
        done = self.agent == self.goal
        reward = 1.0 if done else (-self.step_penalty if self.reward_mode == "per_step" else 0.0)
        return self.observation(), reward, done, self.state_key()

    def expert_action(self, rng: random.Random, noise: float) -> str:
        """A shortest-path move (random among the useful ones), or with probability ``noise`` a
        uniformly random move: the warm start's demonstrations."""
        if rng.random() < noise:
            return rng.choice(sorted(ACTIONS))
        useful = [a for a, (dx, dy) in sorted(ACTIONS.items())
                  if (dx and (self.goal[0] - self.agent[0]) * dx > 0) or (dy and (self.goal[1] - self.agent[1]) * dy > 0)]
        return rng.choice(useful)
