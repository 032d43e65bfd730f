#!/bin/sh
# Slurm + munge (Debian bookworm: slurm-wlm 22.05) and submitit, for tests/slurm_cluster.py.
# Idempotent and quiet: each part is skipped when already there; a failing step prints its log.
set -eu
PYTHON=${PYTHON:-python3}
SUBMITIT=1.5.4
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
quiet() { "$@" >"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }; }   # apt and pip warn on stderr

missing=""
for bin in slurmctld slurmd sinfo sbatch squeue scancel munged mungekey; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1 || missing="$missing $bin"
done
if [ -n "$missing" ]; then
  quiet apt-get update -qq
  # The basic plugins hold all the test cluster uses; the recommended extras (ipmi, hdf5, rocm...) do not.
  quiet env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm slurmctld slurmd slurm-client munge
fi

if ! "$PYTHON" -c "import submitit, sys; sys.exit(submitit.__version__ != '$SUBMITIT')" 2>/dev/null; then
  quiet "$PYTHON" -m pip install -q "submitit==$SUBMITIT"
fi
