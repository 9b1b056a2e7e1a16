# Two commands set everything up on a fresh machine:
#   make run    venv + torch (CPU) + project + default models + clips, then the server (the main job)
#   make test   the same set-up, then the whole test suite
# Both are idempotent; a second run only re-checks stamps.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.specscribe-installed
ASSETS := $(VENV)/.specscribe-assets
PYTEST_ARGS ?=

.PHONY: setup run demo test test-fast clean

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

# The main job: the live-caption server on the default models (open the printed URL, press Start, speak).
run: setup
	$(BIN)/specscribe serve

# A quick check without a microphone: transcribe the demo clip to out/jfk.{txt,srt,json}.
demo: setup
	$(BIN)/specscribe transcribe "$$($(BIN)/specscribe clips path)/jfk.flac" -f txt,srt,json -o out
	cat out/jfk.txt

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) out build *.egg-info
