# Two entry points (see README):
#   make book   set up .venv, build the book with every notebook executed, print index.html
#   make test   set up .venv, build the book if it is out of date, get Chromium, run the linter (ruff), the type
#               checker (mypy, settings in pyproject.toml), run pytest
# Any Sphinx warning, cell error or failing test fails the target.

SHELL      := /bin/bash
VENV       := .venv
PY         := $(VENV)/bin/python
ENV_STAMP  := $(VENV)/.path-book-deps
HTML       := _build/html
BUILD_STAMP := $(HTML)/.path-book-built
CHROMIUM   := /usr/bin/chromium
PYTEST_ARGS ?= -n 2 --durations=15

# Everything the rendered book depends on: the notebooks execute path_lib/kernels code
# and may read recorded results. (find is quiet about folders that do not exist yet.)
BOOK_INPUTS := _config.yml _toc.yml \
    $(shell find book path_lib kernels results benchmarks/results -type f \
        -not -path '*/__pycache__/*' -not -path '*/.ipynb_checkpoints/*' \
        -not -path 'book/_build/*' -not -name '*.pyc' 2>/dev/null)

.PHONY: book test env clean FORCE
.DELETE_ON_ERROR:

book: $(BUILD_STAMP)
	@echo "Book built: $(abspath $(HTML)/index.html)"

env: $(ENV_STAMP)

# The script always runs (it is cheap when nothing changed) and rewrites the stamp only when
# the requirements changed, so make rebuilds the book only then.
$(ENV_STAMP): FORCE
	@scripts/setup_env.sh

# Notebooks run with PATH_BOOK_STATIC=1 (path_lib.book.widgets then emits self-contained HTML
# sliders, not ipywidgets) and with the venv first on PATH (the kernel is the venv's python).
BUILD_ENV := PATH_BOOK_STATIC=1 MPLBACKEND=Agg PATH="$(abspath $(VENV))/bin:$$PATH"

# 1. execute all notebooks, two at a time, into a fresh cache; 2. build every page (--all)
# from that cache (Sphinx re-executes and reports any notebook that failed in step 1).
$(BUILD_STAMP): $(ENV_STAMP) $(BOOK_INPUTS)
	@rm -f $@
	$(BUILD_ENV) $(PY) scripts/execute_notebooks.py
	$(BUILD_ENV) $(VENV)/bin/jupyter-book build . --all -W -n --keep-going
	@touch $@

# The browser test drives Debian's Chromium through Playwright (no `playwright install`).
$(CHROMIUM):
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

test: $(BUILD_STAMP) | $(CHROMIUM)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	MPLBACKEND=Agg $(PY) -m pytest $(PYTEST_ARGS) tests

clean:
	rm -rf _build

FORCE:
