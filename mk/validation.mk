# Cluster validation and observability: node_health, NCCL acceptance, monitoring. Included by the Makefile.
MOLECULE_SCENARIOS += node_health observability
VALIDATION_ARGS ?=

.PHONY: test-validation validate-cluster
test-validation: setup ## unit + molecule tests of node_health, NCCL acceptance and monitoring
	$(BIN)/pytest tests/unit/validation $(PYTEST_ARGS)
	$(BIN)/molecule test -s node_health
	$(BIN)/molecule test -s observability

validate-cluster: setup ## node health checks on the lab (or INVENTORY=...); JSON in results/node_health/
	$(BIN)/ansible-playbook playbooks/validate_cluster.yml -i $(or $(INVENTORY),inventories/local) $(VALIDATION_ARGS)
