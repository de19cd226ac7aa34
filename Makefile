# trainstack.cluster — one entry point for set-up, the lab, tests and benchmarks.
# `make demo` and `make test` do all set-up themselves (root on Debian 12 / Ubuntu 22.04+).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV        ?= $(CURDIR)/.venv
PY          := $(VENV)/bin/python
BIN         := $(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.cache/collections
COLLECTION_LINK := $(ANSIBLE_COLLECTIONS_PATH)/ansible_collections/trainstack/cluster
LAB_NODES   ?= 3
# Root filesystem tarball the lab's nodes are made from (empty: the cached debootstrap base).
LAB_BASE_IMAGE ?=
PYTEST_ARGS ?=

# Lint steps run by make test; each area adds to it in its mk/*.mk.
LINT_TARGETS := sanity lint-packer
# The molecule scenarios are listed once, in molecule/scenarios.yml: $(call scenarios,--suite test) names those of
# make test, in order; --suite slow those of make test-slow (in shards: tests/slow_shards.yml); add --component
# <area> for one area's. Expanded when a recipe runs, after `setup` has made the virtualenv that reads the file.
scenarios = $(shell $(PY) $(CURDIR)/scripts/molecule_scenarios.py $(1))
MOLECULE_SCENARIOS = $(call scenarios,--suite test)
# $(call molecule_each,<scenarios>): molecule test of each in turn, stopping at the first that fails.
molecule_each = for s in $(1); do echo "== molecule test -s $$s"; $(BIN)/molecule test -s "$$s" || exit 1; done
# Unit tests that share a process with Ansible (the test cases' torch.compile cannot; make unit runs them apart).
ANSIBLE_UNIT_TESTS := tests/unit --ignore=tests/unit/testcases
-include mk/*.mk

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

# ---------------------------------------------------------------- set-up
.PHONY: host-deps venv collection-link setup
host-deps: ## install system packages (root, Debian/Ubuntu only; idempotent)
	@scripts/host-deps.sh

# uv installs the pins: it downloads in parallel and skips byte-compiling, where pip took about 300 s of one
# core for the same 2.5 GB (torch, triton, the collections of the `ansible` package). It is pinned with the rest
# in requirements.txt and bootstrapped with the virtualenv's own pip. uv reads no pip configuration: a
# find-links directory given to pip in the environment (PIP_FIND_LINKS, e.g. local CPU torch wheels) is passed on,
# and the system's CA store is used, as pip's is.
$(VENV)/.stamp: requirements.txt $(wildcard requirements-*.txt)
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --retries 10 "$$(grep -E '^uv==' requirements.txt)"
	UV_HTTP_RETRIES=10 $(BIN)/uv pip install -q --native-tls --python $(PY) \
	  $(addprefix --find-links ,$(PIP_FIND_LINKS)) -r requirements.txt $(addprefix -r ,$(wildcard requirements-*.txt))
	touch $@

venv: $(VENV)/.stamp ## controller virtualenv from pinned requirements

# The repository is the collection root; expose it under a collections path so FQCNs resolve in place.
$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

collection-link: $(COLLECTION_LINK)

setup: host-deps venv collection-link ## everything `make demo` and `make test` need

# ---------------------------------------------------------------- collection
.PHONY: build
build: setup ## build trainstack-cluster-<version>.tar.gz into build/
	mkdir -p build
	$(BIN)/ansible-galaxy collection build --force --output-path build .

# ---------------------------------------------------------------- lab
.PHONY: lab-up lab-status lab-down
lab-up: setup ## start the local LXC lab (LAB_NODES=3: one head, rest compute; LAB_ELASTIC=N elastic nodes)
	$(BIN)/ansible-playbook trainstack.cluster.lab_up -e lab_node_count=$(LAB_NODES) $(if $(LAB_ELASTIC),-e lab_elastic_nodes=$(LAB_ELASTIC)) \
	  $(if $(LAB_BASE_IMAGE),-e lab_base_image=$(LAB_BASE_IMAGE))

lab-status: setup ## show lab nodes, their systemd state and addresses
	$(BIN)/ansible-playbook trainstack.cluster.lab_status

lab-down: setup ## remove lab containers, bridge, keys and processes
	$(BIN)/ansible-playbook trainstack.cluster.lab_down

# ---------------------------------------------------------------- tests
.PHONY: lint unit molecule integration test test-slow
lint: setup $(LINT_TARGETS) ## ansible-lint (production), yamllint, ruff, syntax checks
	$(BIN)/yamllint -s .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# ansible-lint installs the project into ~/.ansible/collections; drop a copy left by an older checkout.
	rm -rf ~/.ansible/collections/ansible_collections/trainstack
	@# ansible-lint also runs `ansible-playbook --syntax-check` on every playbook (its unskippable syntax-check rule).
	$(BIN)/ansible-lint --offline

unit: setup ## unit tests (no containers)
	@# The test cases run torch.compile, which cannot share a process with Ansible (it patches sys.intern).
	@# The Ansible-side tests are independent of each other: one worker per core.
	$(BIN)/pytest -n auto $(ANSIBLE_UNIT_TESTS) $(PYTEST_ARGS)
	@# Slow ones (torchtitan/llama training on CPU, from the slow wheelhouse) run in make test-slow.
	$(BIN)/pytest tests/unit/testcases -m "not slow" $(PYTEST_ARGS)

molecule: setup wheelhouse ## molecule scenarios run in make test (MOLECULE_JOBS side by side)
	@# The lab first: its bridge, package proxy, base image and key are what every scenario's nodes use.
	@mkdir -p .cache; $(BIN)/ansible-playbook trainstack.cluster.lab_up -e lab_node_count=$(LAB_NODES) -e lab_recreate_failed=true > .cache/lab-up.log \
	  || { tail -n 40 .cache/lab-up.log; exit 1; }
	scripts/run-molecule.sh $(MOLECULE_SCENARIOS)

# One process, in collection order: the lab tests depend on running after one another (teardown last). The
integration: setup ## integration tests (lab, moto, packer), one process
	$(BIN)/pytest tests/integration -m "not slow" --durations=25 $(PYTEST_ARGS)

# The same tests in three parts that may run side by side: those that use the lab or build with LXC (marked `host`
# by tests/integration/conftest.py, one process, in order); of those, the ones that start nodes of their own on
# the lab's bridge and never touch the lab's nodes (marked `own_nodes`), in a process that holds a lock which
# the lab's teardown waits for; and the self-contained rest (moto, Packer against moto, rendered manifests,
# the local launcher).
.PHONY: integration-host integration-own-nodes integration-isolated
integration-host: setup ## integration tests that use the lab or LXC (in order, one process)
	$(BIN)/pytest tests/integration -m "host and not own_nodes and not slow" --durations=25 $(PYTEST_ARGS)

integration-own-nodes: setup ## integration tests that start lab nodes of their own, beside the lab's tests
	@mkdir -p .cache
	flock .cache/own-nodes.lock $(BIN)/pytest tests/integration -m "own_nodes and not slow" --durations=25 $(PYTEST_ARGS)

integration-isolated: setup ## self-contained integration tests (moto, packer, local launcher)
	$(BIN)/pytest tests/integration -m "not host and not slow" --durations=25 $(PYTEST_ARGS)

# Stages run in order and the run ends with the seconds each took (set-up counts: on a fresh machine it is most).
# On two cores the molecule scenarios keep both busy but for their package downloads: lint, whose sanity
# virtualenvs download too, takes what they leave. The lab's own tests (one process, in order) leave a core
# mostly idle: the tests that start lab nodes of their own, the unit tests, the self-contained integration tests
# and the build of the local image that the lab's last tests boot from run beside them. A stage fails if any of
# its parts fails.
TEST_STAGES := setup wheelhouse molecule+lint integration-host+integration-own-nodes+integration-isolated+unit+test-image
test: ## everything CI runs: set-up, lint, unit, molecule, integration; prints each stage's time
	@TRAINSTACK_TEST_IMAGE=$(TEST_IMAGE_OUT) MAKE="$(MAKE)" scripts/run-stages.sh $(TEST_STAGES)

# The slow suite is cut into shards of similar length, listed once in tests/slow_shards.yml (every slow
# scenario and every test marked `slow` in exactly one; a unit test checks). `make test-slow SHARD=k` runs shard
# k, `make test-slow` every shard in turn (each is reported; the run fails if any failed). CI runs one shard per
# change in rotation (`scripts/slow_shards.py rotation`). A shard's stages: the lab (its scenarios' bridge,
# proxy and base image; its tests' nodes), then its molecule scenarios beside its pytest selections, in two
# processes (the test cases' torch.compile cannot share one with Ansible). Both wheelhouses come first: the slow
# test cases install from the slow one, the training_job and artifact scenarios from make test's.
SHARD ?=
slow_shard = $(shell $(PY) $(CURDIR)/scripts/slow_shards.py $(1) $(SHARD))
SLOW_SHARD_STAGES := slow-lab slow-integration+slow-molecule+slow-testcases
test-slow: setup ## slow suites in shards (tests/slow_shards.yml): SHARD=k runs one, else all
	@shards="$(if $(SHARD),$(SHARD),$$($(PY) scripts/slow_shards.py indexes))"; failed=""; \
	for k in $$shards; do $(PY) scripts/slow_shards.py molecule "$$k" > /dev/null || exit 2; done; \
	$(MAKE) --no-print-directory wheelhouse wheelhouse-slow || exit 1; \
	for k in $$shards; do \
	  echo "== slow shard $$k: molecule $$($(PY) scripts/slow_shards.py molecule "$$k")"; \
	  SHARD="$$k" STAGE_LOGS=.cache/stage-logs/slow-$$k MAKE="$(MAKE)" scripts/run-stages.sh $(SLOW_SHARD_STAGES) \
	    || failed="$$failed $$k"; \
	done; \
	if [ -n "$$failed" ]; then echo "== slow shards that failed:$$failed"; exit 1; fi

.PHONY: slow-lab slow-molecule slow-integration slow-testcases
slow-lab: setup ## the lab for a slow shard (scenarios and lab tests start from it)
	@mkdir -p .cache; $(BIN)/ansible-playbook trainstack.cluster.lab_up -e lab_node_count=$(LAB_NODES) -e lab_recreate_failed=true > .cache/lab-up.log \
	  || { tail -n 40 .cache/lab-up.log; exit 1; }

slow-molecule: setup ## the slow molecule scenarios of shard SHARD, side by side
	@scenarios="$(call slow_shard,molecule)"; \
	if [ -z "$$scenarios" ]; then echo "shard $(SHARD): no molecule scenarios"; else scripts/run-molecule.sh $$scenarios; fi

slow-integration: setup ## the slow tests of shard SHARD that run with Ansible (one process, in order)
	@selection="$(call slow_shard,integration)"; \
	if [ -z "$$selection" ]; then echo "shard $(SHARD): no integration tests"; \
	else $(BIN)/pytest $$selection -m slow --durations=25 $(PYTEST_ARGS); fi

slow-testcases: setup ## the slow test case tests of shard SHARD (a process of their own: torch.compile)
	@selection="$(call slow_shard,testcases)"; \
	if [ -z "$$selection" ]; then echo "shard $(SHARD): no test case tests"; \
	else $(BIN)/pytest $$selection -m slow --durations=25 $(PYTEST_ARGS); fi

# ---------------------------------------------------------------- containers
# OCI images of the stack with buildah (docs/containers.md): CONTAINER_FLAVOURS="base pytorch" (parents are built
# first); CONTAINER_REGISTRY=http(s)://host[:port][/namespace] pushes them (http:// needs CONTAINER_ALLOW_HTTP=1).
CONTAINER_FLAVOURS ?= base pytorch
CONTAINER_REGISTRY ?=
CONTAINER_ALLOW_HTTP ?= 0
# Manifest format of the push: oci, or v2s2 for a registry enroot must import from (docs/containers.md).
CONTAINER_FORMAT ?= oci
# Mirror of the release sources the CUDA flavours build (aws-ofi-nccl, nccl-tests); empty: the artifact mirror.
CONTAINER_SOURCE_MIRROR ?=
.PHONY: container-local
container-local: setup wheelhouse ## build OCI images (buildah) of the stack from the local image's Debian 12; push to CONTAINER_REGISTRY
	BUILDAH_ISOLATION=chroot $(BIN)/ansible-playbook playbooks/build_container.yml -e trainstack_stack=$(STACK) \
	  -e '{"container_flavours": $(shell $(PY) -c 'import json,sys; print(json.dumps(sys.argv[1:]))' $(CONTAINER_FLAVOURS))}' \
	  -e container_registry_url=$(CONTAINER_REGISTRY) -e container_registry_allow_http=$(filter 1,$(CONTAINER_ALLOW_HTTP)) \
	  -e container_registry_format=$(CONTAINER_FORMAT) \
	  $(if $(CONTAINER_SOURCE_MIRROR),-e container_source_mirror_url=$(CONTAINER_SOURCE_MIRROR)) \
	  -e container_source_revision=$(IMAGE_REVISION) -e container_host_ca_certs=true -e pytorch_wheelhouse=$(WHEELHOUSE)

# ---------------------------------------------------------------- demo
.PHONY: demo
# The demo builds the local image (base, Slurm, CPU PyTorch), makes the lab's nodes from it, and trains with the
# image's own PyTorch. DEMO_IMAGE=0 skips the image: debootstrap nodes and a test-case virtualenv instead.
DEMO_IMAGE ?= 1
demo: setup wheelhouse $(if $(filter 1,$(DEMO_IMAGE)),image-local) ## build the local image, lab cluster on it + Slurm, FSDP on two nodes; prints the results
	$(BIN)/ansible-playbook trainstack.cluster.demo -i inventories/local -e lab_node_count=$(LAB_NODES) \
	  $(if $(filter 1,$(DEMO_IMAGE)),-e lab_base_image=$(LOCAL_IMAGE) -e training_job_venv=false \
	    -e training_job_python=/opt/trainstack/venv/bin/python)


# ---------------------------------------------------------------- docs
.PHONY: docs
docs: venv ## regenerate role READMEs from meta/argument_specs.yml
	$(PY) scripts/role_docs.py

.PHONY: instance-catalog
instance-catalog: setup ## render stacks/instance_types.yml into module_utils/catalog/instance_catalog_data.py
	$(PY) scripts/instance_catalog.py

# ---------------------------------------------------------------- training
WHEELHOUSE := $(CURDIR)/.cache/wheelhouse
.PHONY: wheelhouse
wheelhouse: $(WHEELHOUSE)/.stamp ## wheels the lab's test cases install from (CPU torch; no CUDA download)

$(WHEELHOUSE)/.stamp: testcases/*/*/testcase.yml testcases/*/*/requirements.lock | venv
	mkdir -p $(WHEELHOUSE)
	$(PY) scripts/wheelhouse.py --dest $(WHEELHOUSE) testcases/*/*/testcase.yml
	touch $@

# Test cases whose manifest says `wheelhouse: slow` (torchtitan/llama: about 400 MB with its dependencies),
# kept out of the wheelhouse make test downloads; make test-slow and their lab launches use this one.
WHEELHOUSE_SLOW := $(CURDIR)/.cache/wheelhouse-slow
.PHONY: wheelhouse-slow
wheelhouse-slow: $(WHEELHOUSE_SLOW)/.stamp ## wheels of the slow test cases (torchtitan/llama), CPU torch

$(WHEELHOUSE_SLOW)/.stamp: testcases/*/*/testcase.yml testcases/*/*/requirements.lock | venv
	mkdir -p $(WHEELHOUSE_SLOW)
	$(PY) scripts/wheelhouse.py --set slow --dest $(WHEELHOUSE_SLOW) testcases/*/*/testcase.yml
	touch $@

# Each test case's requirements.lock (every package of its closure with sha256 hashes, resolved for the lab's
# nodes); the wheelhouses download from them and launches install from them. Beside it, one
# requirements.<target>.lock per GPU target of the current stack (PyPI's CUDA torch; testcases/gpu_targets.yml
# lists the exceptions). TESTCASE_MANIFESTS picks cases; TARGETS picks targets (all, gpu, lab, or names such as
# gpu-ubuntu-24.04-x86_64, comma-separated).
TESTCASE_MANIFESTS ?= $(wildcard testcases/*/*/testcase.yml)
TARGETS ?= all
.PHONY: testcase-locks
testcase-locks: | venv ## resolve each test case's pins into hash-pinned locks (lab and GPU targets) beside its manifest
	$(PY) scripts/testcase_lock.py --targets $(TARGETS) $(TESTCASE_MANIFESTS)

.PHONY: bench-launch
bench-launch: setup wheelhouse ## launch overhead on the lab vs bare sbatch (bench/results/launch_overhead.json)
	$(BIN)/ansible-playbook trainstack.cluster.lab_up >/dev/null
	$(BIN)/ansible-playbook trainstack.cluster.slurm_cluster -i inventories/local >/dev/null
	$(PY) -m bench.launch_overhead.run

# ---------------------------------------------------------------- ansible-test
# ansible-test needs the tree under ansible_collections/<ns>/<name> and a pip bootstrap script that this
# network cannot download (ci-files.testing.ansible.com): a copy of the tracked files and our stand-in do.
# Every sanity test runs, each in its own virtualenv from PyPI (--requirements); the findings that stay are
# in tests/sanity/ignore-2.19.txt, each with its reason. shellcheck and pslint run where their programs are
# installed (ansible-test skips them with a warning otherwise). SANITY_ARGS: e.g. --test pylint.
SANITY_DIR := $(CURDIR)/.cache/sanity/ansible_collections/trainstack/cluster
SANITY_ARGS ?=
.PHONY: sanity
sanity: setup ## ansible-test sanity, every test (justified exceptions: tests/sanity/ignore-2.19.txt)
	rm -rf $(SANITY_DIR) && mkdir -p $(SANITY_DIR) ~/.ansible/test/cache
	@# amazon.aws sits next to the collection, as ansible-test expects of a dependency: fsx_lustre extends its
	@# documentation fragments.
	mkdir -p $(CURDIR)/.cache/sanity/ansible_collections/amazon
	ln -sfn "$$($(PY) -c 'import ansible_collections.amazon.aws as c; print(c.__path__[0])')" \
		$(CURDIR)/.cache/sanity/ansible_collections/amazon/aws
	@# Tracked files as they are in the work tree; those deleted there (listed twice) are left out.
	{ git ls-files -z; git ls-files -z --deleted; } | sort -z | uniq -zu | xargs -0 tar -cf - | tar -xf - -C $(SANITY_DIR)
	cd $(SANITY_DIR) && git init -q . && git add -A
	cp scripts/ansible-test-get-pip.py ~/.ansible/test/cache/get_pip_24_2.py
	cd $(SANITY_DIR) && $(BIN)/ansible-test sanity --python 3.11 --local --requirements $(SANITY_ARGS)
