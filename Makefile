# Two commands do everything: `make demo` (install, then compile the best files for the default machine)
# and `make test` (the test suite, then .ci/wheel-check: a wheel installed outside the checkout must
# work). CI (.ci/run) calls `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
COLLS := $(VENV)/bin/colls
STAMP := $(VENV)/.installed

.PHONY: install demo test wheel-check bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: install
	@mkdir -p out
	$(COLLS) compile --hardware dgx-a100 --nodes 2 --collective all -o out/dgx-a100-x2
	$(COLLS) explain out/dgx-a100-x2 --ranks 16 --bytes 1GB --collective allgather

test: install
	$(PY) -m pytest
	PYTHON=$(PY) .ci/wheel-check

wheel-check: install
	PYTHON=$(PY) .ci/wheel-check

bench: install
	$(PY) bench/run.py
	$(PY) bench/scale.py
	$(PY) bench/refusals.py
	$(PY) bench/refusals.py --target mscclpp --methods ring,trees,direct,hier --nodes 4,8,16,32,64,1000,100000 --out bench/REFUSALS-MSCCLPP.md
	$(PY) bench/refusals.py --commands bound,show,derive,simulate,verify,compile --out bench/REFUSALS-COMMANDS.md
	$(PY) bench/calibrate.py
	$(PY) bench/files.py
	$(PY) bench/simulate.py
	$(PY) bench/milp.py
	$(PY) bench/plans.py
	$(PY) bench/speedup.py

clean:
	rm -rf $(VENV) out .pytest_cache
