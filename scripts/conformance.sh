#!/bin/sh
# TRL's own GRPO trainer tests (tests/conformance, vendored with provenance), offline, non-slow subset:
#   1. against stock trl.GRPOTrainer,
#   2. against GrpoLabTrainer without method= (it must train what GRPOConfig says), plus TRL's basic training tests
#      once per registered grpolab method (tests/conformance/test_methods.py).
# Both runs always happen; the exit status is the first non-zero pytest status (1 = a test failed, including a
# strict xfail that passed; 2-5 = interrupted, internal, usage error, nothing collected), else 0.
set -u
PYTHON=${PYTHON:-python3}
run() {
    echo "== conformance: trainer=$1"
    GRPOLAB_CONFORMANCE_TRAINER=$1 GRPOLAB_CONFORMANCE_METHOD=none \
        "$PYTHON" -m pytest -q -p no:cacheprovider -n 2 -m 'not slow' --durations=10 tests/conformance
}
status=0
run stock || status=$?
code=0
run grpolab || code=$?
[ "$status" -ne 0 ] || status=$code
exit "$status"
