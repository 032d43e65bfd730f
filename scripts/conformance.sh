#!/bin/sh
# TRL's own GRPO trainer tests (tests/conformance, vendored with provenance), offline:
#   1. against stock trl.GRPOTrainer,
#   2. against GrpoLabTrainer without method= (it must train what GRPOConfig says), plus TRL's basic training tests
#      once per registered grpolab method (tests/conformance/test_methods.py).
# Every test, the `slow` ones included (CONFORMANCE_MARK='not slow' leaves them out: the quick subset).
# Both runs always happen; the exit status is the first non-zero pytest status (1 = a test failed, including a
# strict xfail that passed; 2-5 = interrupted, internal, usage error, nothing collected), else 0.
set -u
PYTHON=${PYTHON:-python3}
MARK=${CONFORMANCE_MARK:-}
run() {
    echo "== conformance: trainer=$1${MARK:+, -m '$MARK'}"
    GRPOLAB_CONFORMANCE_TRAINER=$1 GRPOLAB_CONFORMANCE_METHOD=none \
        "$PYTHON" -m pytest -q -p no:cacheprovider -n 2 --dist worksteal ${MARK:+-m "$MARK"} --durations=10 \
        tests/conformance
}
status=0
run stock || status=$?
code=0
run grpolab || code=$?
[ "$status" -ne 0 ] || status=$code
exit "$status"
