# NVIDIA stack roles: driver, cuda, nccl, gdrcopy, dcgm, container_runtime. Included by the Makefile.
# nvidia_userspace (NCCL wheel, stand-in vendor repositories) runs in make test; nvidia_driver (Debian 535 DKMS
# build for the container's installed cloud kernel, several minutes on 2 cores) runs in make test-slow
# (molecule/scenarios.yml says which suite each is in).
VERIFY_NVIDIA_ARGS ?=

.PHONY: test-nvidia molecule-slow-nvidia verify-nvidia
test-nvidia: setup ## NVIDIA roles: unit tests (marker nvidia) and their scenarios of make test
	$(BIN)/pytest $(ANSIBLE_UNIT_TESTS) -m nvidia $(PYTEST_ARGS)
	@$(call molecule_each,$(call scenarios,--suite test --component nvidia))

molecule-slow-nvidia: setup ## slow NVIDIA scenarios (driver DKMS build); part of make test-slow
	@$(call molecule_each,$(call scenarios,--suite slow --component nvidia))

verify-nvidia: ## read-only driver/GPU/NCCL checks of this machine (VERIFY_NVIDIA_ARGS="--check -e ...")
	$(BIN)/ansible-playbook -i localhost, -c local playbooks/verify_nvidia.yml $(VERIFY_NVIDIA_ARGS)
