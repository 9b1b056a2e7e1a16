# Two commands set everything up on a fresh machine:
#   make run    venv + torch (CPU) + project + default models + clips, then the main job
#   make test   the same set-up, then the whole test suite
# Both are idempotent; a second run only re-checks stamps.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.specscribe-installed
ASSETS := $(VENV)/.specscribe-assets
PYTEST_ARGS ?=

.PHONY: setup run test test-fast transcribe-demo bench clean

setup: $(STAMP) $(ASSETS)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first, pinned: `pip install torch==2.13.0` takes the CPU wheel on this machine's disk;
# letting a dependency pull torch would fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

$(ASSETS): $(STAMP)
	$(BIN)/specscribe models install base
	$(BIN)/specscribe clips install
	touch $@

run: setup
	$(BIN)/specscribe transcribe "$$($(BIN)/specscribe clips path)/jfk.flac" --output-format txt --output-dir out

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) out build *.egg-info
