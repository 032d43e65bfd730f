"""The one TRL GRPOTrainer subclass (the only module touching TRL internals: grpo_trainer), the
drop-in's decisions (dropin) with a GRPOConfig read as a method spec (trl_fields) and a method
written into a GRPOConfig (trl_settings), and what the trainer measures and
samples: metrics, dynamic sampling, the critic, loss statistics, and the benchmark scores of its
evaluation (benchmark_eval)."""
