locals {
  # One timestamp per packer run, so every AMI of a run shares it.
  timestamp  = formatdate("YYYYMMDD-hhmmss", timestamp())
  repo_root  = abspath("${path.root}/..")
  packer_dir = abspath(path.root)
  # The stack to install: -var stack_id=..., else the collection's current stack (stacks/current, its one default).
  stack_id = var.stack_id != "" ? var.stack_id : trimspace(file(abspath("${path.root}/../stacks/current")))

  # The AMI flavours whose roles include pytorch, which bakes the test case environments (build_image.yml's
  # image_flavours; tests/unit/image/test_packer_templates.py keeps the two in step). Their builds are tagged
  # with the test cases asked for ("all": the role's default); image.json says what was baked and skipped.
  baking_flavours = ["slurm-gpu", "pcluster-gpu"]
  testcase_tags = contains(local.baking_flavours, var.flavour) ? {
    "trainstack:pytorch_testcases" = var.pytorch_testcases == null ? "all" : join(",", var.pytorch_testcases)
  } : {}

  common_tags = merge(var.extra_tags, local.testcase_tags, {
    "trainstack:stack"    = local.stack_id
    "trainstack:revision" = var.source_revision
    "trainstack:built"    = local.timestamp
  })

  # The local build's outputs, in one place: Packer's manifest records the lab rootfs path (custom_data.lab_rootfs)
  # so that callers (make demo, the lab's lab_base_image) read it from there instead of rebuilding the name.
  local_outdir = "${abspath(var.output_dir)}/local-${var.local_flavour}"
  lab_rootfs   = "${local.local_outdir}/trainstack-${local.stack_id}-${var.local_flavour}-debian12.rootfs.tar"

  # The snapshot the local build container starts from (the stage plan's resume.snapshot; empty: the base).
  lxc_rootfs_from = var.image_stage_plan == "" ? "" : jsondecode(file(var.image_stage_plan)).resume.snapshot
  lxc_rootfs_args = local.lxc_rootfs_from == "" ? [] : ["--rootfs-from", local.lxc_rootfs_from]

  ansible_env = [
    "ANSIBLE_CONFIG=${local.repo_root}/ansible.cfg",
    "ANSIBLE_COLLECTIONS_PATH=${local.repo_root}/.cache/collections",
    # Packer's ansible provisioner reaches the instance through a proxy on 127.0.0.1 with a one-off key and port:
    # nothing to check, and nothing worth recording in known_hosts. Inventories keep checking on (ansible.cfg).
    "ANSIBLE_HOST_KEY_CHECKING=False",
    "ANSIBLE_SSH_ARGS=-o ControlMaster=auto -o ControlPersist=120s -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
  ]

  # The test cases' names joined by commas (validated names: no space or shell character, so the local build's
  # shell command takes them as one word); the pytorch role splits them. Absent: the role's default, all.
  pytorch_testcases_args = var.pytorch_testcases == null ? [] : ["-e", "pytorch_testcases=${join(",", var.pytorch_testcases)}"]

  ansible_common_args = concat([
    "-e", "trainstack_stack=${local.stack_id}",
    "-e", "image_source_revision=${var.source_revision}",
    "-e", "artifact_mirror_url=${var.artifact_mirror_url}",
    "-e", "image_output_dir=${abspath(var.output_dir)}",
    "-e", "pytorch_wheelhouse=${var.wheelhouse}",
  ], local.pytorch_testcases_args)

  ubuntu_owner    = "099720109477"
  amazon_owner    = "amazon"
  pcluster_owner  = "247102896272"
  eks_owner       = "602401143452"
  pcluster_prefix = "aws-parallelcluster-${var.pcluster_version}"
}
