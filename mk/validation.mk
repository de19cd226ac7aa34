# Cluster validation and observability: node_health, NCCL acceptance, monitoring. Included by the Makefile.
VALIDATION_ARGS ?=

.PHONY: test-validation validate-cluster
test-validation: setup ## unit + molecule tests of node_health, NCCL acceptance and monitoring
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) -m validation $(PYTEST_ARGS)
	@$(call molecule_each,$(call scenarios,--suite test --component validation))

validate-cluster: setup ## node health checks on the lab (or INVENTORY=...); JSON in results/node_health/
	$(BIN)/ansible-playbook playbooks/validate_cluster.yml -i $(or $(INVENTORY),inventories/local) $(VALIDATION_ARGS)
