# gpu-cluster — the user-facing commands (DESIGN §6). Each sets up ./venv from requirements.txt
# when it is missing or older than requirements.txt.
PYTHON ?= python3
VENV := venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-from-requirements
SETUP_VENV := { test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
              { test $(STAMP) -nt requirements.txt || \
                { $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt && touch $(STAMP); }; }

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
	@$(SETUP_VENV)

# `plan` and `check` exit 0 (clean), 1 (a mandatory policy violation) or 2 (bad input). GNU make turns
# every failed recipe into 2, so these two run their command while this file is read: its output is
# printed, 2 fails the recipe, and 1 switches make into question mode (-q), in which make runs no
# recipe and exits 1 because the phony goal is "out of date".
offline_goals := $(filter plan check,$(MAKECMDGOALS))
ifneq ($(offline_goals),)
  ifneq ($(words $(offline_goals)),1)
    $(error run `make plan` and `make check` separately: each has its own exit status)
  endif
  ifeq ($(offline_goals),check)
    ifeq ($(PLAN),)
      $(error give a plan file: make check PLAN=path/to/plan.json)
    endif
    offline_args := check $(PLAN) $(if $(POLICY_CONFIG),--policy-config $(POLICY_CONFIG))
  else
    offline_args := plan $(plan_args)
  endif
  setup_status := $(shell $(SETUP_VENV) >&2; echo $$?)
  ifneq ($(setup_status),0)
    $(error could not set up $(VENV) from requirements.txt)
  endif
  offline_out := $(shell mktemp)
  offline_status := $(shell $(PY) -m offline $(offline_args) > $(offline_out); echo $$?)
  $(if $(file < $(offline_out)),$(info $(file < $(offline_out))))
  $(shell rm -f $(offline_out))
  ifeq ($(offline_status),1)
    MAKEFLAGS += -q
  endif
endif

plan check:
	@exit $(offline_status)

review: $(STAMP)
	@test -n "$(BASE)" || { echo "error: give a base ref: make review BASE=origin/main" >&2; exit 2; }
	@$(PY) -m offline review --base $(BASE)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	@$(PY) -m bench

clean:
	rm -rf build
