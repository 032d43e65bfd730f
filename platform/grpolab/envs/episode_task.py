"""Multi-turn environments as a task kind: ``task: {name: gridworld, ...}`` in an experiment.

An ``EpisodeTask`` offers what the platform asks of a task (splits, warm-start targets, reward
functions, a verifier, held-out evaluation) for episodes instead of single completions, and
builds the ``rollout_func`` TRL's GRPOTrainer runs its multi-turn path with. Examples are initial
states: the prompt is the reset observation, ``meta["env_seed"]`` the seed. Rewards: the episode
return (sum of step rewards) is the one reward component (``episode_return``); correctness is the
environment's success (reached the goal).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from grpolab.envs.base import checked_reset, checked_step
from grpolab.envs.gridworld import GridWorld
from grpolab.errors import ConfigError
from grpolab.method.advantages import ADVANTAGES
from grpolab.method.episode_norms import EPISODE_NORMS
from grpolab.method.kl import kl_in_reward
from grpolab.method.sampling_modes import SAMPLING_MODES, sampling_modes
from grpolab.world.task import Draws, Example, Task, seeded_draws

OUTCOMES_KEPT = 200_000   # recorded (prompt, episode text) outcomes before the store is cleared

# name -> (defaults, environment factory from params, observation tokens per turn)
ENVS = {
    "gridworld": ({"size": 4, "max_turns": 8, "reward": "sparse", "step_penalty": 0.1, "action_tokens": 2,
                   "demo_noise": 0.5},
                  lambda p: GridWorld(p["size"], p["reward"], p["step_penalty"]), lambda p: 7),
}


def _check_params(name: str, p: dict) -> None:
    ints = {"size": (2, 9), "max_turns": (1, 64), "action_tokens": (1, 16)}
    for key, (low, high) in ints.items():
        value = p[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"task.{key}: expected an integer in [{low}, {high}] for task {name!r}, got {value!r}")
    if p["reward"] not in ("sparse", "per_step"):
        raise ConfigError(f"task.reward: unknown value {p['reward']!r}; valid: sparse, per_step")
    for key in ("step_penalty", "demo_noise"):
        value = p[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"task.{key}: expected a number in [0, 1], got {value!r}")


def make_env_task(name: str, **params) -> "EpisodeTask":
    defaults, factory, obs_tokens = ENVS[name]
    unknown = set(params) - set(defaults)
    if unknown:
        raise ConfigError(f"task.{sorted(unknown)[0]}: not a parameter of task {name!r}; valid: {', '.join(defaults)}")
    merged = {**defaults, **params}
    _check_params(name, merged)
    return EpisodeTask(name, merged, lambda: factory(merged), obs_tokens(merged))


@dataclass
class EpisodeTask(Task):
    name: str
    params: dict
    make_env: object
    obs_tokens: int
    reward_names: tuple = ("episode_return",)
    outcomes: dict = field(default_factory=dict, repr=False)   # (prompt, episode text) -> Episode

    @property
    def max_turns(self) -> int:
        return self.params["max_turns"]

    @property
    def max_completion_length(self) -> int:
        return self.max_turns * (self.params["action_tokens"] + self.obs_tokens)

    def draws(self, seed, n_train: int, n_eval: int, held_out_seed) -> Draws:
        """Initial states from seeded streams (world/task.py), one per distinct reset observation."""
        return seeded_draws(self.name, self._initial_state, seed, n_train, n_eval, held_out_seed)

    def _initial_state(self, rng: random.Random) -> Example:
        env_seed = rng.randrange(2**31)
        return Example(checked_reset(self.make_env(), env_seed), "success", {"env_seed": env_seed})

    def target(self, example: Example, rng: random.Random) -> str:
        """A demonstration episode for the warm start: an expert that takes a random action with
        probability ``demo_noise``; actions end with EOS, observations follow until the end."""
        env = self.make_env()
        checked_reset(env, example.meta["env_seed"])
        parts = []
        for turn in range(self.max_turns):
            action = env.expert_action(rng, self.params["demo_noise"])
            observation, _, done, _ = checked_step(env, action)
            parts.append(action)
            if done or turn == self.max_turns - 1:
                break
            parts.append(f"<eos>{observation}")
        return "".join(parts)

    # -- scoring: episodes are scored when they are run, and looked up by their text --------------
    def record(self, episodes, tokenizer) -> None:
        if len(self.outcomes) > OUTCOMES_KEPT:
            self.outcomes.clear()
        for e in episodes:
            self.outcomes[(e.prompt, tokenizer.decode(e.completion_ids, skip_special_tokens=True))] = e

    def _outcome(self, example: Example, completion: str):
        try:
            return self.outcomes[(example.prompt, completion)]
        except KeyError:
            raise KeyError(f"task {self.name}: no episode was run for this completion of {example.prompt!r}; "
                           "episodes are scored by the rollout that runs them") from None

    def score(self, example: Example, completion: str) -> dict[str, float]:
        return {"episode_return": self._outcome(example, completion).total_reward}

    def is_correct(self, example: Example, completion: str) -> bool:
        return self._outcome(example, completion).success

    def reward_funcs(self, examples, max_len: int) -> list:
        def episode_return(prompts, completions, episode_return, **kwargs):   # an extra field of the rollout
            return [float(r) for r in episode_return]
        return [episode_return]

    def rollout(self, examples: list[Example]):
        from grpolab.envs.trainer_rollout import EpisodeRollout
        return EpisodeRollout(self, examples)

    def evaluate(self, model, tokenizer, examples: list[Example], k: int, temperature: float = 1.0,
                 keep_samples: int = 8):
        """Held-out success: k sampled episodes per initial state, plus one greedy episode."""
        from grpolab.world.generation import EvalResult
        prompts = [e.prompt for e in examples for _ in range(k)]
        seeds = [e.meta["env_seed"] for e in examples for _ in range(k)]
        from grpolab.envs.rollout import Play, run_episodes  # torch: imported when episodes run, not when a config is checked
        run = lambda ps, ss, greedy: run_episodes(model, tokenizer, self.make_env, ps, ss, Play(  # noqa: E731
            self.max_turns, self.params["action_tokens"], temperature, greedy))
        sampled = run(prompts, seeds, False)
        greedy = run([e.prompt for e in examples], [e.meta["env_seed"] for e in examples], True)
        self.record(sampled + greedy, tokenizer)
        hits = [[sampled[i * k + j].success for j in range(k)] for i in range(len(examples))]
        samples = [{"prompt": ex.prompt, "answer": ex.answer, "index": i, "correct": hits[i][0],
                    "completion": tokenizer.decode(sampled[i * k].completion_ids, skip_special_tokens=True),
                    "length": sampled[i * k].model_tokens} for i, ex in enumerate(examples[:keep_samples])]
        n = max(len(examples), 1)
        return EvalResult(pass_at_1=sum(map(sum, hits)) / (n * k), pass_at_k=sum(any(h) for h in hits) / n,
                          greedy_accuracy=sum(e.success for e in greedy) / n,
                          mean_length=sum(e.model_tokens for e in sampled) / max(len(sampled), 1), samples=samples)

    def metrics(self, episodes) -> dict[str, float]:
        from grpolab.envs.rollout import episode_metrics
        return episode_metrics(episodes)


def check_episode_config(cfg, task) -> None:
    """Method and run settings a multi-turn task cannot honour, refused before anything loads
    (one line each); and GiGPO's step term without episodes."""
    s, name = cfg.spec, cfg.task["name"]
    if not isinstance(task, EpisodeTask):
        if s.step_omega > 0:
            raise ConfigError(f"method.step_omega > 0 (GiGPO's step-level advantage) needs a multi-turn environment "
                              f"task (task.name: {', '.join(ENVS)}), got task {name!r}")
        if EPISODE_NORMS[s.episode_norm].per_turn:
            raise ConfigError(f"method.episode_norm={s.episode_norm}: counts episodes per turn, which needs a multi-turn "
                              f"environment task (task.name: {', '.join(ENVS)}), got task {name!r}")
        return
    check_episode_method(s, name)
    for section in ("train", "eval"):   # run_episodes caps by turns and task.action_tokens, never by this
        if getattr(cfg, section).max_completion_length:
            raise ConfigError(f"{section}.max_completion_length: episodes of task {name!r} are capped by task.max_turns "
                              f"and task.action_tokens ({task.max_completion_length} tokens now), not by a completion "
                              "cap; leave it 0")
    if SAMPLING_MODES[s.sampling].multi_turn is not None:
        raise ConfigError(f"method.sampling={s.sampling}: task {name!r} runs episodes through TRL's rollout_func; "
                          f"only sampling={' or '.join(sampling_modes(multi_turn=None))} is supported")
    why_not = ADVANTAGES[s.advantage].multi_turn
    if why_not is not None:
        usable = [e.name for e in ADVANTAGES.values() if e.multi_turn is None and e.missing is None]
        raise ConfigError(f"method.advantage={s.advantage}: not supported on multi-turn task {name!r} ({why_not}); "
                          f"use {', '.join(usable)}")
    if cfg.generation.backend != "transformers":
        raise ConfigError(f"generation.backend={cfg.generation.backend}: task {name!r} generates its episodes turn by "
                          "turn with transformers; use generation.backend=transformers")


def check_episode_method(s, name: str) -> None:
    """Length axes cannot act as meant on an episode (environment tokens count toward its length, and
    it ends at the environment's done or task.max_turns, not at EOS or a token cap), and
    episode_norm=step recomputes A^E from the episode returns, which must then be the whole reward."""
    if s.soft_overlong:
        raise ConfigError(f"method.soft_overlong: the episode length of task {name!r} includes environment tokens; "
                          "cap episodes with task.max_turns instead")
    if s.overlong_filter:
        raise ConfigError(f"method.overlong_filter: TRL's truncation test (last token not EOS) sees only the last "
                          f"action of an episode of task {name!r}: it would drop a whole episode whose final action hit "
                          "task.action_tokens and never one cut at task.max_turns; set overlong_filter: false "
                          "(truncations are counted in episode/truncated)")
    if EPISODE_NORMS[s.episode_norm].per_turn and (kl_in_reward(s) or s.reward_weights is not None):
        raise ConfigError(f"method.episode_norm={s.episode_norm} normalises the episode returns themselves: a "
                          "reward-side KL (kl_placement=reward) or reward_weights would be left out; use "
                          "kl_placement=loss and no reward_weights")
