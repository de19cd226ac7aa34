# NVIDIA stack roles: driver, cuda, nccl, gdrcopy, dcgm, container_runtime. Included by the Makefile.
# nvidia_userspace (NCCL wheel, stand-in vendor repositories) runs in make test; nvidia_driver (Debian 535 DKMS
# build for the container's installed cloud kernel, several minutes on 2 cores) runs in make test-slow.
MOLECULE_SCENARIOS      += nvidia_userspace
NVIDIA_SLOW_SCENARIOS   := nvidia_driver
SLOW_MOLECULE_SCENARIOS += $(NVIDIA_SLOW_SCENARIOS)
VERIFY_NVIDIA_ARGS      ?=

.PHONY: test-nvidia molecule-slow-nvidia verify-nvidia
test-nvidia: setup ## NVIDIA roles: unit tests and the nvidia_userspace scenario
	$(BIN)/pytest tests/unit/roles/test_nvidia_vars.py tests/unit/roles/test_nvidia_flavour_loader.py $(PYTEST_ARGS)
	$(BIN)/molecule test -s nvidia_userspace

molecule-slow-nvidia: setup ## slow NVIDIA scenarios (driver DKMS build); part of make test-slow
	@for s in $(NVIDIA_SLOW_SCENARIOS); do echo "== molecule test -s $$s"; $(BIN)/molecule test -s "$$s" || exit 1; done

test-slow: molecule-slow-nvidia

verify-nvidia: ## read-only driver/GPU/NCCL checks of this machine (VERIFY_NVIDIA_ARGS="--check -e ...")
	$(BIN)/ansible-playbook -i localhost, -c local playbooks/verify_nvidia.yml $(VERIFY_NVIDIA_ARGS)
