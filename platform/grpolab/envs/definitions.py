"""Definitions of the curves multi-turn tasks add (merged into ``grpolab.trainer.metrics.DEFINITIONS``).
Every one is over the episodes generated for one generation batch (each is one completion row),
logged once per generation batch, for every method on a multi-turn task (GRPO's rows too, so
the anchor-group curves show what GiGPO would group)."""

EPISODE_DEFINITIONS = {
    "episode/turns": "generated episodes (multi-turn tasks): mean number of model turns (actions) per episode",
    "episode/success_rate": "generated episodes: fraction that reached the environment's goal (= `accuracy` there)",
    "episode/truncated": "generated episodes: how many of this batch's episodes hit task.max_turns without ending",
    "episode/return": "generated episodes: mean undiscounted episode return (sum of step rewards, the reward)",
    "episode/model_tokens": "generated episodes: mean model tokens per episode (the trained tokens; `length/*` "
                            "count the whole sequence, environment tokens included)",
    "anchor/groups": "generated episodes: number of anchor-state step groups (equal states within an episode group, "
                     "method.anchor_similarity) over the batch",
    "anchor/group_size_mean": "generated episodes: mean number of steps per anchor-state group",
    "anchor/singleton_step_fraction": "generated episodes: fraction of steps whose anchor group has one step (GiGPO's "
                                      "step advantage is 0 there)",
    "anchor/groups_size_<bucket>": "generated episodes: fraction of anchor groups with 1, 2, 3to4, 5to8 or over8 steps "
                                   "(the size distribution)",
}
