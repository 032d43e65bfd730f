"""Studies: the study file (definition), search spaces and objectives, the Optuna storage, a
row's identity and state (rows), the coordinator, the worker loop (trials), worker processes,
row lifecycle (heartbeats, reaping, hand-back), registration of verdict fields; devices per
worker and rows on several processes (devices, ranks), worker jobs on Slurm (slurm)."""
