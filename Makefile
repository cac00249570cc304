# The user's loop: edit schemas/*.yaml, `make codegen`, `make build`, `import runtime`.
PYTHON ?= python
SCHEMAS ?= schemas

.PHONY: setup check list codegen codegen-check build demo test test-slow test-cuda fuzz golden bench clean \
	snapshot bc-check docs docs-check

# Idempotent: installs the pinned environment unless this interpreter already has it (0.1 s).
# Every target that runs opgen runs it first, so each works on a fresh machine.
setup:
	@$(PYTHON) .ci/env_ok.py || $(PYTHON) -m pip install -r requirements-dev.txt

check: setup
	$(PYTHON) -m codegen check $(SCHEMAS)

list: setup
	$(PYTHON) -m codegen list $(SCHEMAS)

codegen: setup
	$(PYTHON) -m codegen generate $(SCHEMAS)

codegen-check: setup
	$(PYTHON) -m codegen generate --check $(SCHEMAS)

# The op contracts: schemas/opgen.lock records them (refresh on purpose, with a release);
# bc-check fails on a break the op files do not declare (docs/FORMAT.md, Compatibility).
snapshot: setup
	$(PYTHON) -m codegen snapshot $(SCHEMAS)

bc-check: setup
	$(PYTHON) -m codegen bc-check $(SCHEMAS)

# The op reference, docs/ops/<namespace>.md (docs-check: exit 1 when it is stale).
docs: setup
	$(PYTHON) -m codegen docs $(SCHEMAS)

docs-check: setup
	$(PYTHON) -m codegen docs --check $(SCHEMAS)

# Compile build/lib<ns>_ops.so with ninja (toolchain from torch.utils.cpp_extension).
build: setup
	$(PYTHON) -m codegen.build

# Set up, generate, build, and call every example op eagerly.
demo: setup
	@$(MAKE) --no-print-directory codegen build
	$(PYTHON) examples/demo.py

test: setup
	$(PYTHON) -m pytest -q -m "not slow"

test-slow: setup
	$(PYTHON) -m pytest -q -m slow

# The CUDA path without a GPU: a cached venv with the CUDA build of the pinned torch (and nvcc from
# the cuda-toolkit wheels when no toolkit is installed), then the example built with nvcc on both
# ABIs, imported, and every declared CUDA kernel found registered (tests/test_build_cuda.py).
CUDA_VENV ?= $(HOME)/.cache/opgen/venv-cuda
test-cuda: setup
	@CUDA_HOME=$$($(PYTHON) .ci/cuda_venv.py $(CUDA_VENV)) && \
	CUDA_HOME=$$CUDA_HOME OPGEN_CUDA_PYTHON=$(CUDA_VENV)/bin/python \
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/test_build_cuda.py

# Long property-test campaign (hypothesis, fresh randomness): the parser and loader properties, and
# whole op files end to end (tests/test_fuzz_opfiles.py: thousands of files mutated as bytes, YAML
# and tokens through check/generate, with the generated C++ of a sample syntax-checked by g++).
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PYTHON) -m pytest -q tests -k "propert or fuzz"

# Refresh golden files and pinned diagnostics after an intended change.
golden:
	EXPECTTEST_ACCEPT=1 $(PYTHON) -m pytest -q tests -k "golden or diagnostic"

# Every benchmark under bench/, one after another (each prints its figures and ratios).
bench: build
	@for b in bench/bench_*.py; do echo "== $$b"; $(PYTHON) $$b || exit 1; echo; done

clean:
	rm -rf build
