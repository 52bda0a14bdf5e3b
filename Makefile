# gpu-cluster — the user-facing commands (DESIGN §6). Each sets up ./venv from requirements.txt
# when it is missing or older than requirements.txt.
PYTHON ?= python3
VENV := venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-from-requirements

STACK ?=
STACK_FILE ?=
PLAN ?=
BASE ?=
POLICY_CONFIG ?=

plan_args := $(if $(STACK),--stack $(STACK)) $(if $(STACK_FILE),--stack-file $(STACK_FILE)) \
             $(if $(POLICY_CONFIG),--policy-config $(POLICY_CONFIG))

.PHONY: plan check review test bench venv clean

venv: $(STAMP)

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

plan: $(STAMP)
	@$(PY) -m offline plan $(plan_args)

check: $(STAMP)
	@test -n "$(PLAN)" || { echo "error: give a plan file: make check PLAN=path/to/plan.json" >&2; exit 2; }
	@$(PY) -m offline check $(PLAN) $(if $(POLICY_CONFIG),--policy-config $(POLICY_CONFIG))

review: $(STAMP)
	@test -n "$(BASE)" || { echo "error: give a base ref: make review BASE=origin/main" >&2; exit 2; }
	@$(PY) -m offline review --base $(BASE)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	@$(PY) -m bench

clean:
	rm -rf build
