# AWS cluster specs and their ParallelCluster 3 configurations. Included by the Makefile.
# ParallelCluster's own schema checks the rendered configurations; it lives in a virtualenv of its own (it pins
# its own boto3 and marshmallow), made only when a target needs it and keyed by the pin file's digest, so a
# changed pin makes a new one and an unchanged pin reuses the cached one.
PCLUSTER_REQUIREMENTS := $(CURDIR)/mk/pcluster-requirements.txt
PCLUSTER_VENV ?= $(CURDIR)/.cache/pcluster-venv-$(shell sha256sum $(PCLUSTER_REQUIREMENTS) | cut -c1-12)
CLUSTER_SPECS ?= $(wildcard inventories/aws/clusters/*.yml)
CLUSTER_RENDER_DIR := $(CURDIR)/build/clusters

.PHONY: pcluster-venv cluster-configs validate-pcluster test-cluster node-bundle
$(PCLUSTER_VENV)/.stamp: $(PCLUSTER_REQUIREMENTS)
	rm -rf $(PCLUSTER_VENV)
	python3 -m venv $(PCLUSTER_VENV)
	$(PCLUSTER_VENV)/bin/pip install -q --disable-pip-version-check --retries 10 --require-hashes --no-deps \
	  -r $(PCLUSTER_REQUIREMENTS)
	touch $@

pcluster-venv: $(PCLUSTER_VENV)/.stamp ## ParallelCluster's own package, pinned, in .cache/pcluster-venv-<digest>

cluster-configs: setup ## check each spec (CLUSTER_SPECS) and render its ParallelCluster config into build/clusters/
	@mkdir -p $(CLUSTER_RENDER_DIR)
	$(PY) scripts/render_clusters.py --out $(CLUSTER_RENDER_DIR) $(CLUSTER_SPECS)

validate-pcluster: cluster-configs pcluster-venv ## the rendered configs through ParallelCluster's own schema and offline validators
	$(PCLUSTER_VENV)/bin/python scripts/pcluster_validate.py $(CLUSTER_RENDER_DIR)/*.yaml

test-cluster: setup pcluster-venv ## cluster spec and rendering tests, with the slow ones through ParallelCluster's schema
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) -m cluster $(PYTEST_ARGS)

# What every ParallelCluster node's OnNodeConfigured action installs (docs/aws-parallelcluster.md, "Node bootstrap").
node-bundle: setup ## build the node bundle and bootstrap.sh into build/node-bundle/; BUCKET=<name> also uploads them
	$(BIN)/ansible-playbook playbooks/node_bundle.yml $(if $(BUCKET),-e node_bundle_bucket=$(BUCKET))
