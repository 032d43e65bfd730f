"""The one TRL GRPOTrainer subclass (grpo_trainer), the only module that touches TRL's private
methods and state, and the parts it builds and calls in order, each a plain object with its own
state: correctness, group_sampling, estimator_inputs, pi_old_entropy, stages (a generation batch's
advantages and metrics over a ``Rollout`` record), step_times, empty_updates, loss_curves (the
loss-side curves, over loss_stats' windows), benchmark_eval (the benchmark scores of its evaluation), the critic and
grpolab_state (the checkpointed parts); batch_extras carries grpolab's per-row loss inputs in TRL's
batch as one record. Also the drop-in's decisions (dropin) with a GRPOConfig read as a method spec
(trl_fields) and a method written into a GRPOConfig (trl_settings), and what the trainer measures
and samples: metrics, dynamic sampling, vLLM engine access (vllm_engine)."""
