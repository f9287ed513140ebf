# Two commands on a fresh machine:  `make train` (a short Cartpole run) and `make test` (the test suite; CI runs
# it). `make test-fast` runs the tests without a simulator or a subprocess. All create the Python 3.12 virtual
# environment on first use.

PYTHON ?= $(shell PYENV_VERSION=3.12.1 pyenv which python3.12 2>/dev/null || command -v python3.12)
VENV ?= .venv
NUM_ENVS ?= 64
MAX_ITERATIONS ?= 50

# Without an asset server configured, use the offline asset root vendored in the package.
ifeq ($(ISAACSIM_ASSET_ROOT),)
export ISAACLAB_TORCHRL_OFFLINE_ASSETS ?= 1
endif

.PHONY: venv train test test-fast clean

venv: $(VENV)/.installed

$(VENV)/.installed: setup.py config/extension.toml
	@test -n "$(PYTHON)" || { echo "Python 3.12 not found: set PYTHON=/path/to/python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	@# Several GB come from PyPI (torch's CUDA libraries): keep no second copy of them in pip's cache (a full
	@# disk shows as interrupted downloads), resume an interrupted download, and try the install three times.
	for attempt in 1 2 3; do \
		$(VENV)/bin/python -m pip install -q --no-cache-dir --resume-retries 30 -e ".[test]" && break; \
		test $$attempt -lt 3 || exit 1; echo "pip install failed (attempt $$attempt of 3): trying again"; \
	done
	touch $@

train: venv
	$(VENV)/bin/python scripts/train.py --task Isaac-Cartpole-Direct --agent torchrl --viz none \
		physics=newton_mjwarp --num_envs $(NUM_ENVS) --max_iterations $(MAX_ITERATIONS)

test: venv
	$(VENV)/bin/python -m pytest tests

test-fast: venv
	$(VENV)/bin/python -m pytest -m fast tests

clean:
	rm -rf $(VENV) logs outputs
