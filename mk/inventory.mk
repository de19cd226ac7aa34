# ec2_cluster inventory plugin: its tests and its benchmark. Included by the Makefile.
INVENTORY_BENCH_ARGS ?=

.PHONY: test-inventory bench-inventory
test-inventory: setup ## unit + moto integration tests of the ec2_cluster inventory plugin
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) tests/integration -m "inventory and not slow" $(PYTEST_ARGS)

bench-inventory: setup ## 5,000-instance moto fleet: ec2_cluster vs amazon.aws.aws_ec2 -> bench/results/inventory.json
	$(PY) -m bench.inventory.run --out bench/results/inventory.json $(INVENTORY_BENCH_ARGS)
