# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Every install goes through constraints.txt, so numpy stays at 1.23.5 (MXNet 1.9.1 breaks on 1.24+).
PYTHON ?= python3.11
VENV   ?= .venv
MXNET  ?= mxnet
EXTRAS ?= tutorials,test,docs,onnx,nlp
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
STAMP   = $(VENV)/.installed-$(MXNET)
PYTEST_ARGS ?=

ifeq ($(MXNET),mxnet)
  MX_EXTRA = cpu
else ifeq ($(MXNET),mxnet-cu112)
  MX_EXTRA = cu112
else
  $(error MXNET must be mxnet (CPU) or mxnet-cu112 (CUDA 11.2), not '$(MXNET)')
endif

.PHONY: venv demo test notebooks docs bench bench-record clean

venv: $(STAMP)

# Rebuilt only when the pins or the package metadata change, so repeated targets are quick.
$(STAMP): constraints.txt setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt pip
	@# gluonnlp (the nlp extra) ships an sdist with a Cython extension: its build needs cython
	@# and wheel in the venv, and no build isolation (which would hide them)
	$(PIP) install -q -c constraints.txt cython wheel
	$(PIP) install -q -c constraints.txt --no-build-isolation -e ".[$(MX_EXTRA),$(EXTRAS)]"
	@# ipykernel stages the kernel spec in a temporary folder and leaves it: give it one we remove
	tmp=$$(mktemp -d) && { TMPDIR=$$tmp $(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null; \
	  status=$$?; rm -rf "$$tmp"; exit $$status; }
	@# the emulation's rounding op, compiled once now rather than at first use (no compiler: a warning)
	$(PY) -c "from mxmixed.emulation import _round16; print('float16 rounding op:', _round16.round16_op() or 'none, cast pairs', '-', _round16.status())"
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: venv
	$(VENV)/bin/mxmixed info
	$(VENV)/bin/mxmixed demo

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

notebooks: venv
	$(VENV)/bin/jupyter lab --notebook-dir=tutorials

docs: venv
	$(PY) -m sphinx -n -W --keep-going -E -b html -d docs/_build/doctrees docs docs/_build/html
	@echo "make docs: open docs/_build/html/index.html"

# Every benchmark, one process each; writes results/bench/results.json (untracked; or into
# $$MXMIXED_BENCH_OUT) and prints a table. No tracked file changes.
bench: venv
	$(PY) benchmarks/run_all.py

# Records the last `make bench` for the docs: merges its suites into the dated committed copy
# benchmarks/recorded/<date>-results.json (replacing the older copy); then commit it.
bench-record: venv
	$(PY) benchmarks/run_all.py --record

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
