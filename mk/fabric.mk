# AWS fabric and storage roles. Included by the Makefile.
FABRIC_MIRROR_DIR ?= /var/cache/trainstack/fabric-mirror

.PHONY: test-fabric fabric-mirror-up fabric-mirror-down
test-fabric: setup ## fabric/storage roles: unit tests, host loop-device test (marker fabric), molecule scenario
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) tests/integration -m fabric $(PYTEST_ARGS)
	@$(call molecule_each,$(call scenarios,--suite test --component fabric))

fabric-mirror-up: setup ## serve the fabric roles' stand-in mirror on the lab bridge (10.77.0.1:8671)
	$(PY) scripts/fabric_mirror.py up --dir $(FABRIC_MIRROR_DIR) --stack stacks/$(STACK).yml

fabric-mirror-down: setup ## stop the fabric mirror's HTTP server
	$(PY) scripts/fabric_mirror.py down --dir $(FABRIC_MIRROR_DIR)
