# The AWS foundation of a cluster (role aws_foundation, module fsx_lustre). Included by the Makefile.

.PHONY: test-aws
test-aws: setup ## aws_foundation and fsx_lustre: unit tests and the moto integration tests
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) tests/integration -m aws $(PYTEST_ARGS)
