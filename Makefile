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
# Horovod (the horovod extra) over gloo, built from its sdist against the venv's MXNet: on by
# default for the CPU wheel; HOROVOD=0 leaves it out (its tests then fail, they do not skip).
HOROVOD ?= $(if $(filter mxnet,$(MXNET)),1,0)
# The build's switches: gloo, MXNet, no MPI, no other framework, and no CUDA. Horovod's
# CMakeLists enables CUDA whenever it finds nvcc (some of these machines have CUDA 13): the
# toolchain file the recipe writes keeps CMake from looking, and the GPU switches are unset.
HOROVOD_ENV = env -u HOROVOD_GPU -u HOROVOD_GPU_OPERATIONS -u HOROVOD_GPU_ALLREDUCE \
  -u HOROVOD_GPU_ALLGATHER -u HOROVOD_GPU_BROADCAST -u HOROVOD_GPU_ALLTOALL \
  -u HOROVOD_GPU_REDUCESCATTER -u HOROVOD_CUDA_HOME -u HOROVOD_WITH_MPI \
  HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1

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
	$(PIP) install -q -c constraints.txt pip setuptools
	@# gluonnlp (the nlp extra) ships an sdist with a Cython extension: its build needs cython
	@# and wheel in the venv, and no build isolation (which would hide them)
	$(PIP) install -q -c constraints.txt cython wheel
	$(PIP) install -q -c constraints.txt --no-build-isolation -e ".[$(MX_EXTRA),$(EXTRAS)]"
	@# ipykernel stages the kernel spec in a temporary folder and leaves it: give it one we remove
	tmp=$$(mktemp -d) && { TMPDIR=$$tmp $(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null; \
	  status=$$?; rm -rf "$$tmp"; exit $$status; }
ifeq ($(HOROVOD),1)
	@# after MXNet, which its build reads. The first build is long (docs/distributed.md says how);
	@# pip caches the wheel, so a second make, or a new venv, installs it in seconds
	@echo "Horovod with gloo: the first build takes 10-20 minutes; pip caches the wheel"
	tmp=$$(mktemp -d) && printf '%s\n' 'set(CMAKE_CUDA_COMPILER CMAKE_CUDA_COMPILER-NOTFOUND)' \
	  'set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit TRUE)' > "$$tmp/no-cuda.cmake" && \
	  { $(HOROVOD_ENV) CMAKE_TOOLCHAIN_FILE="$$tmp/no-cuda.cmake" $(PIP) install -q \
	    -c constraints.txt --no-build-isolation -e ".[$(MX_EXTRA),horovod]"; \
	  status=$$?; rm -rf "$$tmp"; exit $$status; }
	$(PY) -c "import horovod.mxnet as hvd; assert hvd.gloo_built() and not hvd.mpi_built() and not hvd.cuda_built(), 'Horovod was built without gloo or with MPI or CUDA: pip cache remove horovod, then make again'; print('Horovod with gloo: horovodrun --gloo works')"
endif
	@# the emulation's rounding op, compiled once now rather than at first use (no compiler: a warning)
	$(PY) -c "from mxmixed.emulation import _round16; print('float16 rounding op:', _round16.round16_op() or 'none, cast pairs', '-', _round16.status())"
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: venv
	$(VENV)/bin/mxmixed info
	$(VENV)/bin/mxmixed demo

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

# JupyterLab (the notebooks extra) goes in on the first `make notebooks`: the tests do not need it
notebooks: $(VENV)/.notebooks-$(MXNET)
	$(VENV)/bin/jupyter lab --notebook-dir=tutorials

$(VENV)/.notebooks-$(MXNET): $(STAMP)
	$(PIP) install -q -c constraints.txt --no-build-isolation -e ".[$(MX_EXTRA),notebooks]"
	@touch $@

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
