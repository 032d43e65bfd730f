#!/bin/sh
# TRL's own GRPO trainer tests (tests/conformance, vendored with provenance), offline:
#   1. against stock trl.GRPOTrainer,
#   2. against GrpoLabTrainer without method= (it must train what GRPOConfig says), plus TRL's basic training tests
#      once per registered grpolab method (tests/conformance/test_methods.py).
# Every test, the `slow` ones included (CONFORMANCE_MARK='not slow' leaves them out: the quick subset).
# CONFORMANCE_PARALLEL=1 runs the two at once, one test process each on one core (GRPOLAB_TEST_CORES=1), their
# outputs printed in order when both end: `make test` runs this beside the main suite. Otherwise one after the
# other, two test processes each.
# Both runs always happen; the exit status is the first non-zero pytest status (1 = a test failed, including a
# strict xfail that passed; 2-5 = interrupted, internal, usage error, nothing collected), else 0.
set -u
PYTHON=${PYTHON:-python3}
MARK=${CONFORMANCE_MARK:-}
PARALLEL=${CONFORMANCE_PARALLEL:-0}
run() {
    echo "== conformance: trainer=$1${MARK:+, -m '$MARK'}"
    if [ "$PARALLEL" = 1 ]; then workers=1; else workers=2; fi
    GRPOLAB_CONFORMANCE_TRAINER=$1 GRPOLAB_CONFORMANCE_METHOD=none \
        "$PYTHON" -m pytest -q -p no:cacheprovider -n $workers --dist worksteal ${MARK:+-m "$MARK"} --durations=10 \
        tests/conformance
}
if [ "$PARALLEL" = 1 ]; then
    logs=$(mktemp -d)
    GRPOLAB_TEST_CORES=1 run stock > "$logs/stock" 2>&1 &
    stock=$!
    GRPOLAB_TEST_CORES=1 run grpolab > "$logs/grpolab" 2>&1 &
    grpolab=$!
    status=0; wait $stock || status=$?
    code=0; wait $grpolab || code=$?
    cat "$logs/stock" "$logs/grpolab"
    rm -rf "$logs"
else
    status=0; run stock || status=$?
    code=0; run grpolab || code=$?
fi
[ "$status" -ne 0 ] || status=$code
exit "$status"
