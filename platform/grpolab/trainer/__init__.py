"""The one TRL GRPOTrainer subclass (grpo_trainer) and the mixins it is built from (step_times,
group_sampling, estimator_inputs, pi_old_entropy, correctness, vllm_engine): the only modules that touch
TRL's private methods and state. Also the drop-in's decisions (dropin) with a GRPOConfig read as a
method spec (trl_fields) and a method written into a GRPOConfig (trl_settings), and what the trainer
measures and samples: metrics, dynamic sampling, the critic, loss statistics, and the benchmark scores
of its evaluation (benchmark_eval)."""
