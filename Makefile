# Two commands set everything up on a fresh machine:
#   make run    venv + torch (CPU) + project + default models + clips, then the server (the main job)
#   make test   the same set-up, then the whole test suite
# Both are idempotent; a second run only re-checks stamps. System packages (Debian) come first, from
# scripts/system_deps.sh: installed with apt-get as root or with passwordless sudo, else one line saying
# the command to run, and nothing else happens.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.specscribe-installed
ASSETS := $(VENV)/.specscribe-assets
PYTEST_ARGS ?=
# `make test` runs pytest-xdist workers, one per core (at most 4): tests/conftest.py pins each to its share of
# the cores with as many OpenMP threads, and --dist loadfile keeps a file's tests (and its module-scoped
# models) in one worker. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: setup run demo test test-fast clean system-deps-run system-deps-test

setup: $(STAMP) $(ASSETS)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first, pinned: `pip install torch==2.13.0` takes the CPU wheel on this machine's disk;
# letting a dependency pull torch would fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,ray]'
	$(PY) -m compileall -q models pipeline web specscribe  # as pip does for an installed package: a faster first start
	touch $@

$(ASSETS): $(STAMP)
	$(BIN)/specscribe models install base
	$(BIN)/specscribe clips install
	touch $@

system-deps-run system-deps-test: system-deps-%:
	@PYTHON=$(PYTHON) sh scripts/system_deps.sh $*

# The main job: the live-caption server on the default models (open the printed URL, press Start, speak).
# The system check runs first, and alone (a recursive make), even under make -j.
run:
	@$(MAKE) --no-print-directory system-deps-run
	@$(MAKE) --no-print-directory setup
	$(BIN)/specscribe serve

# A quick check without a microphone: transcribe the demo clip to out/jfk.{txt,srt,json}.
demo: setup
	$(BIN)/specscribe transcribe "$$($(BIN)/specscribe clips path)/jfk.flac" -f txt,srt,json -o out
	cat out/jfk.txt

test:
	@$(MAKE) --no-print-directory system-deps-test
	@$(MAKE) --no-print-directory setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast:  # unit tests only: no browser needed
	@$(MAKE) --no-print-directory system-deps-run
	@$(MAKE) --no-print-directory setup
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) out build *.egg-info
