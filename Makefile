# Set-up and everyday jobs. Every target creates .venv on first use.
PY      ?= python3.11
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# torch pinned to the CPU build on disk (a looser pin would download a multi-GB CUDA build)
DEPS    := torch==2.13.0 bpy==5.0.1 "numpy>=1.24" "scipy>=1.10" threadpoolctl pytest pytest-xdist hypothesis matplotlib

.PHONY: venv test test-fast demo train data eval eval-small bench build build-dev check-bundle clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q $(DEPS)
	$(VPY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# One pytest worker per core (pytest-xdist), each test file on one worker so its module fixtures
# (a trained model, an installed add-on) are made once; one BLAS/OpenMP thread per worker, since
# two workers with two threads each on two cores only wait for each other.
test: $(STAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(VPY) -m pytest -q -x -n auto --dist loadfile tests

demo: $(STAMP)
	$(VPY) -m neurok_blender.demo --out demo_out

# Training data from the reference simulator (stable neo-Hookean, quadratic cells). The folder is
# named for the simulator and generator that made it (ref5: loads bounded by stiffness,
# self-contact on the lattice's surface), so data of an older one is never resumed into.
# 40 sequences took 20 minutes on 2 free cores (2.0 sequences/minute, 2026-12-02; docs/PHYSICS.md);
# 120 took 58 minutes on one core (2.1/minute, 2026-12-02). Resumable: run it again to go on.
data: $(STAMP)
	$(VPY) -m engine generate --out data/train_ref5 --sequences 120 --seed 1 --workers 2

# The default checkpoint: data (above) + 25 minutes of training, within an hour on 2 cores.
train: data
	$(VPY) -m engine train --data data/train_ref5 --out runs/default.ckpt --minutes 25
	cp runs/default.ckpt assets/neurok_default.ckpt

eval-small: $(STAMP)
	$(VPY) -m engine evalsuite --preset small --out eval_out

eval: $(STAMP)
	$(VPY) -m engine evalsuite --preset full --out eval_out

bench: $(STAMP)
	$(VPY) -m engine bench --json eval_out/bench.json

# For users: the self-contained zip for this platform (bundles the torch CPU + scipy wheels, 238 MB for
# linux-x64; extensions may not download code at run time). Other platforms: build.py --bundle-torch PLATFORM.
build: $(STAMP)
	$(VPY) build.py

# Build that zip, install it into a fresh bpy-only venv (no torch/scipy) and bake with it (about 2 minutes).
check-bundle: $(STAMP)
	$(VPY) tools/check_bundle.py

# For development and CI: the small zip without wheels (0.2 MB; needs torch/scipy in Blender's Python).
build-dev: $(STAMP)
	$(VPY) build.py --no-wheels

clean:
	rm -rf build dist demo_out eval_out
