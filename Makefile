# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint runtime venv peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# What the daemon needs to run, nothing more: the demo needs no test toolchain.
runtime: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

# The daemon plus the test toolchain (pytest, ruff, mypy, the a2a-sdk for interop...).
venv: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'

# The official SDKs the interop tests use as peers, installed before the suite runs rather
# than by its first test: a2a-sdk 0.3 in a virtualenv of its own, @a2a-js/sdk with npm
# (skipped, and its tests with it, where Node is missing).
peers: venv
	$(BIN)/python -c "from tests.sdk03_support import sdk03_python; sdk03_python()"
	$(BIN)/python -c "from tests.js_support import js_sdk_missing; print(js_sdk_missing() or '')"

# A registry and two Butler instances on loopback: delegation, routing, the safety rules.
demo: runtime
	$(BIN)/butler demo

# Lint, strict type-check, then the whole test suite (warnings are errors).
test: venv peers
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
