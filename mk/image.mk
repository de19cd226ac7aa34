# Image factory: stacks, artifacts, Packer templates, local image. Included by the Makefile.
STACK          ?= $(shell cat $(CURDIR)/stacks/current)
IMAGE_FLAVOUR  ?= slurm-gpu
IMAGE_OUT      ?= $(CURDIR)/build/image
MIRROR_DIR     ?=
MIRROR_SOURCE  ?=
# Cached debootstrap rootfs + apt/pip caches of the local build (empty: the template's default).
IMAGE_CACHE_DIR ?=
# CPU weight of the build container (1-10000; empty: Packer's default, 100, an ordinary process's share).
IMAGE_CPU_WEIGHT ?=
# Stage reuse of the local build (docs/image-factory.md, "Stage reuse"): 1 starts from the snapshot of the last
# stage whose inputs are unchanged and snapshots every stage it runs; 0 builds every stage on the base and
# neither reads nor writes snapshots. IMAGE_STAGE_KEEP snapshots stay in the cache (least recently used go
# first); IMAGE_STAGE_REBUILD=<role> runs that role's stage and every later one again (to pick up a moved
# package archive, which no key covers).
IMAGE_STAGE_CACHE   ?= 1
IMAGE_STAGE_KEEP    ?= 8
IMAGE_STAGE_REBUILD ?=
PACKER         ?= packer
IMAGE_REVISION := $(shell git -C $(CURDIR) rev-parse --short HEAD 2>/dev/null || echo unknown)
PACKER_VARS     = -var stack_id=$(STACK) -var source_revision=$(IMAGE_REVISION) -var output_dir=$(IMAGE_OUT) \
                  -var ansible_playbook=$(BIN)/ansible-playbook $(if $(IMAGE_CACHE_DIR),-var lxc_cache_dir=$(IMAGE_CACHE_DIR)) \
                  $(if $(IMAGE_CPU_WEIGHT),-var lxc_cpu_weight=$(IMAGE_CPU_WEIGHT))
# What a local build leaves for its users: Packer's manifest, which names the lab rootfs (custom_data.lab_rootfs).
LOCAL_IMAGE     = $(IMAGE_OUT)/local-$(IMAGE_FLAVOUR)/packer-manifest.json

.PHONY: check-stack mirror lint-packer image-local image-ami bench-image
check-stack: setup ## check a stack against stacks/rules.yml (STACK=<id>, default stacks/current)
	$(BIN)/ansible-playbook playbooks/check_stack.yml -e trainstack_stack=$(STACK)

mirror: setup ## fetch STACK's artifacts into MIRROR_DIR (dir or s3://) and lock their sha256 in stacks/locks/
	@test -n "$(MIRROR_DIR)" || { echo "mirror: MIRROR_DIR=<directory or s3://bucket/prefix> is required" >&2; exit 2; }
	$(BIN)/ansible-playbook playbooks/mirror_stack.yml -e trainstack_stack=$(STACK) -e mirror_dest=$(MIRROR_DIR) \
	  $(if $(MIRROR_SOURCE),-e mirror_source_url=$(MIRROR_SOURCE))

lint-packer: setup ## packer fmt -check and packer validate of every build (Packer 1.6.6 and current)
	$(PACKER) fmt -check packer
	$(PACKER) validate $(PACKER_VARS) packer

# The test cases whose lab environments the local image bakes (from the wheelhouse): the demo's and the one the
# lab's baked-launch test runs. Each is a CPU torch environment (its files shared with the others' by hardlinks).
# Empty: none.
LOCAL_TESTCASES ?= pytorch/fsdp pytorch/ddp
__comma := ,
__local_testcases := [$(subst $(eval) ,$(__comma),$(patsubst %,"%",$(strip $(LOCAL_TESTCASES))))]
# The stage plan: written before Packer runs (scripts/image_stages.py), read by the LXC template (which snapshot
# to start from) and by build_image.yml (which stages to apply).
__stage_plan := $(IMAGE_OUT)/local-$(IMAGE_FLAVOUR)/stages.json
image-local: setup wheelhouse ## build the local Debian 12 image (LXC); its manifest: $(LOCAL_IMAGE)
	@case "$(IMAGE_STAGE_CACHE)" in 0|1) ;; *) echo "image-local: IMAGE_STAGE_CACHE=$(IMAGE_STAGE_CACHE) must be 1 (reuse stages) or 0 (a clean build)" >&2; exit 2 ;; esac
	rm -f $(__stage_plan)
	$(if $(filter 1,$(IMAGE_STAGE_CACHE)),$(PY) scripts/image_stages.py --flavour $(IMAGE_FLAVOUR) --stack $(STACK) \
	  --cache-dir $(or $(IMAGE_CACHE_DIR),/var/cache/trainstack/image) --keep $(IMAGE_STAGE_KEEP) \
	  --rebuild '$(IMAGE_STAGE_REBUILD)' --wheelhouse $(WHEELHOUSE) --testcases '$(subst $(eval) ,$(__comma),$(strip $(LOCAL_TESTCASES)))' \
	  --out $(__stage_plan))
	$(PACKER) build -force -only 'local.*' $(PACKER_VARS) -var local_flavour=$(IMAGE_FLAVOUR) -var wheelhouse=$(WHEELHOUSE) \
	  -var 'pytorch_testcases=$(__local_testcases)' $(if $(filter 1,$(IMAGE_STAGE_CACHE)),-var image_stage_plan=$(__stage_plan)) packer
	@echo "image-local: $(LOCAL_IMAGE)"

image-ami: setup ## build AMIs of one flavour on AWS (IMAGE_FLAVOUR=base-gpu|slurm-gpu|pcluster-gpu|eks-gpu|pcs-gpu|batch-gpu)
	$(PACKER) build -only 'ami.*' -var flavour=$(IMAGE_FLAVOUR) $(PACKER_VARS) packer

bench-image: setup ## cold vs warm local image build time and size (JSON in bench/results/)
	$(PY) -m bench.image_build.bench_image_build --flavour $(IMAGE_FLAVOUR) --stack $(STACK)

# The local image the integration tests share. make test builds it beside the lab's tests and hands its directory
# to them (TRAINSTACK_TEST_IMAGE); they wait for build.log (success) or build.failed (the build's output); a plain
# `make integration` builds its own. The build container is a control group of its own, which the nice level of
# the stage does not reach: TEST_IMAGE_CPU_WEIGHT (half an ordinary process's) lets the lab's tests, which run
# one after another, keep the CPU they ask for, while the build still ends before the tests that boot it.
TEST_IMAGE_OUT := $(CURDIR)/.cache/test-image
TEST_IMAGE_CPU_WEIGHT ?= 50
.PHONY: test-image
test-image: setup wheelhouse ## build the local image the integration tests use (.cache/test-image, log included)
	rm -rf $(TEST_IMAGE_OUT) && mkdir -p $(TEST_IMAGE_OUT)
	$(MAKE) --no-print-directory image-local IMAGE_FLAVOUR=slurm-gpu IMAGE_OUT=$(TEST_IMAGE_OUT) \
	  IMAGE_CPU_WEIGHT=$(TEST_IMAGE_CPU_WEIGHT) \
	  > $(TEST_IMAGE_OUT)/build.out 2>&1 \
	  || { mv $(TEST_IMAGE_OUT)/build.out $(TEST_IMAGE_OUT)/build.failed; tail -n 80 $(TEST_IMAGE_OUT)/build.failed; exit 1; }
	mv $(TEST_IMAGE_OUT)/build.out $(TEST_IMAGE_OUT)/build.log
	@echo "test-image: $(TEST_IMAGE_OUT)/local-slurm-gpu"
