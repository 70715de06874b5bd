# Nodesmith developer entry points. `make demo` and `make test` work on a fresh machine with
# Python 3.11, node and npm: each creates (or reuses) .venv and installs what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help install demo test lint format typecheck arch unit synth cdk-cli bench lambda-asset clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock
	@$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

install: $(STAMP)  ## Create .venv and install the pinned dependencies

node_modules/.installed: package.json package-lock.json
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $@

cdk-cli: node_modules/.installed  ## Install the pinned CDK CLI (npm)

demo: install  ## Run the end-to-end demo on the embedded AWS and Kubernetes
	$(BIN)/nodesmith demo

lint: install  ## ruff
	$(BIN)/ruff check lambdas infra tests bench app.py

format: install
	$(BIN)/ruff check --fix lambdas infra tests bench app.py
	$(BIN)/ruff format lambdas infra tests bench app.py

typecheck: install  ## mypy, strict (package and bench/)
	$(BIN)/mypy

arch: install  ## import-linter layer contracts
	$(BIN)/lint-imports

KUBECTL_NOTE := kubectl not found: the playground tests (tests/cli/test_playground_with_kubectl.py) are skipped. \
Install kubectl v1.30 or newer from https://kubernetes.io/docs/tasks/tools/ (Debian's kubernetes-client is too old).

# --dist loadfile: a test file runs whole on one worker, so a module-scoped world (the playground, the kubectl
# tests) is never split between workers or torn down between its tests (pytest-xdist 3.8's loadgroup does not
# group under pytest 9).
unit: install cdk-cli  ## pytest (the playground tests drive kubectl v1.30+ when it is on PATH)
	@command -v kubectl >/dev/null || echo "note: $(KUBECTL_NOTE)"
	$(BIN)/pytest -n 2 --dist loadfile

test: lint typecheck arch unit  ## Everything CI runs

synth: install cdk-cli  ## Synthesize the CloudFormation template with the pinned CDK CLI
	npx cdk synth -q

# The Lambda asset: runtime dependencies for Lambda's arm64 Python 3.11 plus the package. The
# stack uses build/lambda when it exists (no Docker bundling needed).
LAMBDA_DEPS := "aws-lambda-powertools[tracer]==3.37.0" "boto3==1.44.5" "kubernetes==37.0.1" "pydantic==2.14.3" "pyyaml==6.0.3" "tomli-w==1.2.0"
lambda-asset: install  ## Build build/lambda for `cdk deploy`
	rm -rf build/lambda && mkdir -p build/lambda
	$(BIN)/python -m pip install -q --disable-pip-version-check --target build/lambda \
		--platform manylinux2014_aarch64 --implementation cp --python-version 3.11 --only-binary=:all: $(LAMBDA_DEPS)
	cp -r lambdas/nodesmith build/lambda/
	find build/lambda -name __pycache__ -prune -exec rm -rf {} +

bench: install  ## Benchmarks (JSON lines)
	$(BIN)/python bench/scheduling.py --pods 5000 --json

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache
