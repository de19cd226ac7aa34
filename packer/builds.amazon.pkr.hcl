# One amazon-ebs build for every flavour: `-var flavour=<flavour>` picks the flavour (variables.pkr.hcl), so
# `packer build -only 'ami.*' -var flavour=slurm-gpu packer/` builds one flavour (README.md), and
# `-only 'ami.amazon-ebs.ubuntu2404-x86_64'` one image of it.

locals {
  # Which base AMIs (sources.amazon.pkr.hcl) each flavour is built on, for every architecture.
  amazon_flavour_bases = {
    # Driver, CUDA, NCCL, EFA, aws-ofi-nccl, GDRCopy on stock Ubuntu / Amazon Linux.
    base-gpu = ["ubuntu2204", "ubuntu2404", "al2023"]
    # base-gpu plus Slurm and enroot/pyxis.
    slurm-gpu = ["ubuntu2204", "ubuntu2404", "al2023"]
    # The stack's NCCL/EFA layers on the official ParallelCluster AMI of var.pcluster_version.
    pcluster-gpu = ["pcluster-ubuntu2204", "pcluster-ubuntu2404", "pcluster-al2023"]
    # The stack's layers on the EKS-optimized accelerated AL2023 AMI of var.eks_kubernetes_version.
    eks-gpu = ["eks-al2023"]
    # base-gpu plus Slurm of a release PCS runs and the AWS PCS agent: compute and login nodes of a PCS cluster.
    pcs-gpu = ["ubuntu2204", "ubuntu2404", "al2023"]
    # base-gpu on Amazon Linux 2023 plus the ECS agent with GPU support: AWS Batch places jobs through ECS.
    batch-gpu = ["al2023"]
  }

  # "<base>-<arch>" -> the source settings of local.amazon_sources plus the AMI's name and tags, for the bases
  # of var.flavour.
  amazon_images = {
    for name, src in local.amazon_sources : name => merge(src, {
      ami_name        = "trainstack-${local.stack_id}-${var.flavour}-${name}-${local.timestamp}"
      ami_description = "trainstack ${var.flavour} image, stack ${local.stack_id}, revision ${var.source_revision}"
      tags = merge(local.common_tags, {
        "trainstack:flavour" = var.flavour
        "trainstack:source"  = name
        Name                 = "trainstack-${var.flavour}-${name}"
      })
    }) if contains(local.amazon_flavour_bases[var.flavour], src.base)
  }
}

build {
  name = "ami"

  # One image per entry of local.amazon_images, named <base>-<arch> (sources.amazon.pkr.hcl).
  dynamic "source" {
    for_each = local.amazon_images
    iterator = image
    labels   = ["amazon-ebs.image"]

    content {
      name            = image.key
      ssh_username    = image.value.ssh_username
      instance_type   = image.value.instance_type
      ami_name        = image.value.ami_name
      ami_description = image.value.ami_description
      tags            = image.value.tags

      source_ami_filter {
        filters     = image.value.ami_filters
        owners      = image.value.owners
        most_recent = true
      }

      # Written whole here, not in the source: its device name is the OS family's, and a build's source block
      # can only add to its source (a second mapping, not a setting of the source's one).
      launch_block_device_mappings {
        device_name           = image.value.root_device
        volume_size           = var.root_volume_gb
        volume_type           = "gp3"
        iops                  = var.root_volume_iops
        throughput            = var.root_volume_throughput
        encrypted             = true
        kms_key_id            = var.kms_key_id
        delete_on_termination = true
      }
    }
  }

  # IMDSv2 (tokens required) on the build instance before Ansible runs; Packer 1.6.6 has no metadata_options.
  provisioner "shell-local" {
    environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
    inline           = ["python3 ${local.packer_dir}/scripts/instance_imdsv2.py --instance-id ${build.ID}"]
  }

  provisioner "ansible" {
    playbook_file    = "${local.repo_root}/playbooks/build_image.yml"
    command          = var.ansible_playbook
    ansible_env_vars = local.ansible_env
    extra_arguments  = concat(local.ansible_common_args, ["-e", "image_flavour=${var.flavour}", "-e", "image_build_name=${source.name}", "--become"])
  }

  post-processors {
    post-processor "manifest" {
      output      = "${var.output_dir}/packer-manifest.json"
      strip_path  = true
      custom_data = { stack = local.stack_id, flavour = var.flavour, revision = var.source_revision }
    }
    post-processor "shell-local" {
      environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
      inline           = ["python3 ${local.packer_dir}/scripts/ami_finalize.py --manifest ${var.output_dir}/packer-manifest.json --imds-support v2.0"]
    }
  }
}
