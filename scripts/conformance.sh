#!/bin/sh
# TRL's own GRPO trainer tests (tests/conformance, vendored with provenance), offline:
#   the drop-in arm: GrpoLabTrainer without method= (it must train what GRPOConfig says), plus TRL's basic
#     training tests once per registered grpolab method (tests/conformance/test_methods.py);
#   the control arm: stock trl.GRPOTrainer on the same tests.
# Every test, the `slow` ones included (CONFORMANCE_MARK='not slow' leaves them out: the quick subset).
# CONFORMANCE_CONTROL=all (default) runs the control arm on every test. CONFORMANCE_CONTROL=drift (`make test`)
# runs it where its answer can change a conclusion: on the DRIFT tests (strict xfails: stock must fail them too,
# so the failure is TRL 1.16's, not the drop-in's) and, after the drop-in arm, on every test the drop-in arm
# failed (a failure stock shares is TRL's or the offline fixtures'; one stock passes is the drop-in's).
# What `make test` leaves to `make conformance` (both arms on every test): a test stock TRL fails while the drop-in
# passes it (a harness or fixture change that the drop-in happens to hide, or the drop-in doing other than TRL).
# Worth a run after a change under tests/conformance or to the TRL, transformers or torch pins.
# With CONTROL=all, CONFORMANCE_PARALLEL=1 runs the two arms at once, one test process each on one core
# (GRPOLAB_TEST_CORES=1); otherwise one after the other, two test processes each. With CONTROL=drift the drift
# tests run first (one process), then the drop-in arm (two). Outputs are printed in order when the arms end.
# The exit status is the first non-zero pytest status of the drop-in arm, then the control arm's (1 = a test
# failed, including a strict xfail that passed; 2-5 = interrupted, internal, usage error, nothing collected),
# else 0. The diagnostic re-run of the drop-in's failures on stock never changes it.
set -u
PYTHON=${PYTHON:-python3}
MARK=${CONFORMANCE_MARK:-}
PARALLEL=${CONFORMANCE_PARALLEL:-0}
CONTROL=${CONFORMANCE_CONTROL:-all}
case "$CONTROL" in all|drift) ;; *) echo "CONFORMANCE_CONTROL must be all or drift, not '$CONTROL'" >&2; exit 4;; esac

# run TRAINER WORKERS [ONLY] [NODE ...]
run() {
    trainer=$1; workers=$2; only=$3; shift 3
    echo "== conformance: trainer=$trainer${only:+, only the $only tests}${MARK:+, -m '$MARK'}${1:+, the drop-in arm's failures}"
    GRPOLAB_CONFORMANCE_TRAINER=$trainer GRPOLAB_CONFORMANCE_METHOD=none GRPOLAB_CONFORMANCE_ONLY=$only \
        "$PYTHON" -m pytest -q -p no:cacheprovider -n "$workers" --dist worksteal ${MARK:+-m "$MARK"} --durations=10 \
        "${@:-tests/conformance}"
}

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
if [ "$CONTROL" = all ]; then
    if [ "$PARALLEL" = 1 ]; then
        GRPOLAB_TEST_CORES=1 run stock 1 "" > "$logs/stock" 2>&1 & stock=$!
        GRPOLAB_TEST_CORES=1 run grpolab 1 "" > "$logs/grpolab" 2>&1 & grpolab=$!
        control=0; wait $stock || control=$?
        status=0; wait $grpolab || status=$?
        cat "$logs/stock" "$logs/grpolab"
    else
        control=0; run stock 2 "" || control=$?
        status=0; run grpolab 2 "" || status=$?
    fi
else
    # beside the main suite (`make test`): the 7 drift tests in one process on one thread (GRPOLAB_TEST_CORES=1);
    # the drop-in arm in two, each on one thread: in one process it ends last, alone on one core
    control=0; GRPOLAB_TEST_CORES=1 run stock 0 drift > "$logs/stock" 2>&1 || control=$?
    status=0; run grpolab 2 "" > "$logs/grpolab" 2>&1 || status=$?
    cat "$logs/stock" "$logs/grpolab"
    # TRL's tests the drop-in failed or errored in; test_methods.py's per-method runs have no stock counterpart
    failed=$(sed -n 's/^\(FAILED\|ERROR\) \([^ ]*\).*/\2/p' "$logs/grpolab" | grep '^tests/conformance/trl_tests/' | sort -u)
    if [ -n "$failed" ]; then
        set -f   # node ids carry [parameters]: no glob expansion
        # shellcheck disable=SC2086  # one word per node id (they hold no spaces)
        run stock 2 "" $failed || true
        set +f
        echo "== conformance: a drop-in failure that stock TRL shares is TRL's or the offline fixtures'; one stock passes is the drop-in's"
    fi
fi
[ "$status" -ne 0 ] || status=$control
exit "$status"
