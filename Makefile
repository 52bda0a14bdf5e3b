# gpu-cluster: a thin convenience over the `gpu-cluster` command (venv/bin/gpu-cluster).
#
# Exit statuses: make exits 0 when the command succeeds and 2 when it fails — GNU make reports every
# failing recipe as 2, so a policy violation (the command's 1) and bad input (the command's 2) both
# reach your shell as 2. Scripts that need the difference run `venv/bin/gpu-cluster ...` directly:
# it returns 0 clean, 1 a mandatory policy violation, 2 bad input or an unreadable file.
#
# Nothing runs while make reads this file: `make -n <target>` only prints what would run.
# Variables reach the commands through the environment, never pasted into a shell line.

.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := venv
BIN := $(VENV)/bin
GPU := $(BIN)/gpu-cluster
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

export STACK STACK_FILE PLAN BASE POLICY_CONFIG ARGS

POLICY_VENV := policies/venv
POLICY_STAMP := $(POLICY_VENV)/.installed

.PHONY: help venv policy-venv lock plan check review catalog test slurm-check bench policy-coverage clean

help: ## list the targets (the default goal)
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: STACK=<name> STACK_FILE=<path> PLAN=<file> BASE=<git ref> POLICY_CONFIG=<file> ARGS='<options>'"

# Every install comes from a lock file (exact versions, hashes), installed by uv, which pip puts in the
# venv first: `make lock` writes the locks again from requirements*.txt and policies/requirements.txt.
UV_VERSION := 0.13.9
UV := $(BIN)/uv
LOCK_FLAGS := --universal --generate-hashes --python-version 3.11 --no-header --quiet

$(UV):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet uv==$(UV_VERSION)

$(STAMP): requirements.lock pyproject.toml | $(UV)
	@echo "setting up ./$(VENV) from requirements.lock"
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r requirements.lock
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e .
	@touch $@

$(TEST_STAMP): $(STAMP) requirements-test.lock
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r requirements-test.lock
	@touch $@

venv: $(STAMP) ## set up ./venv: the program, its providers and the gpu-cluster command

$(POLICY_STAMP): policies/requirements.lock | $(UV)
	@echo "setting up ./$(POLICY_VENV) from policies/requirements.lock: the policy pack's own environment"
	@test -x $(POLICY_VENV)/bin/python || $(PYTHON) -m venv $(POLICY_VENV)
	$(UV) pip install --quiet --python $(POLICY_VENV)/bin/python --require-hashes -r policies/requirements.lock
	@touch $@

policy-venv: $(POLICY_STAMP) ## set up policies/venv so `pulumi preview --policy-pack policies` can load the pack

lock: | $(UV) ## write the lock files again from requirements.txt, requirements-test.txt, policies/requirements.txt
	$(UV) pip compile $(LOCK_FLAGS) requirements.txt -o requirements.lock
	$(UV) pip compile $(LOCK_FLAGS) requirements.txt requirements-test.txt -o requirements-test.lock
	$(UV) pip compile $(LOCK_FLAGS) policies/requirements.txt -o policies/requirements.lock

plan: $(STAMP) ## render, price and policy-check the sample stacks into build/plans/ (STACK=... or STACK_FILE=... for one)
	$(GPU) plan $(if $(STACK),--stack "$$STACK") $(if $(STACK_FILE),--stack-file "$$STACK_FILE") $(if $(POLICY_CONFIG),--policy-config "$$POLICY_CONFIG")

check: $(STAMP) ## run the policy pack on a plan or `pulumi stack export` file (PLAN=...)
	@test -n "$$PLAN" || { echo "error: give a plan file: make check PLAN=path/to/plan.json" >&2; exit 2; }
	$(GPU) check "$$PLAN" $(if $(POLICY_CONFIG),--policy-config "$$POLICY_CONFIG")

review: $(STAMP) ## write build/review.md: every stack at BASE vs the work tree (BASE=origin/main; STACK=... for one)
	@test -n "$$BASE" || { echo "error: give a base ref: make review BASE=origin/main" >&2; exit 2; }
	$(GPU) review --base "$$BASE" $(if $(STACK),--stack "$$STACK")

catalog: $(STAMP) ## list tiers, shapes, zones and prices (ARGS='--cloud aws --json' to filter)
	$(GPU) catalog $$ARGS

# worksteal: a worker that runs out of tests takes from the other's queue, so the long tests (the gRPC
# pack, make review, shellcheck) do not leave one core idle at the end. The suite starts Python
# processes of the program (the command as users run it, forked render workers, both sides of a
# review): they write and reuse bytecode (__pycache__/, ignored by git) also where
# PYTHONDONTWRITEBYTECODE is set, so each does not compile the program's 700 kB of source again
# (0.17 s of CPU a process).
test: $(TEST_STAMP) ## run the test suite
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist worksteal

slurm-check: $(TEST_STAMP) ## run a real Slurm (Debian slurm-wlm + munge, as root) from the generated configuration
	$(BIN)/python -m tests.slurm_local

bench: $(TEST_STAMP) ## measure render, check and review speed (docs/benchmarks.md)
	$(BIN)/python -m bench

policy-coverage: $(TEST_STAMP) ## regenerate the pack's list of subnet inputs from the SDKs (policies/gpu_guardrails/placements.py)
	$(BIN)/python -m gpu_cluster.sdkschema

clean: ## delete build/ (plans, reports, the review)
	rm -rf build
