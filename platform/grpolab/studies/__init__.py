"""Studies: the study file (definition), search spaces and objectives, the Optuna storage, a
row's identity and state (rows), the coordinator, the worker loop (trials), worker processes,
row lifecycle (holders, heartbeat, row_interrupts, hand_back, run_closing, resume), registration of verdict fields; devices per
worker and rows on several processes (devices, ranks), worker jobs on Slurm (slurm)."""
