"""The one TRL GRPOTrainer subclass (the only module touching TRL internals: grpo_trainer), the
translation of a TRL GRPOConfig into a method spec (trl_config), and what the trainer measures and
samples: metrics, dynamic sampling, the critic, loss statistics."""
