# One build per flavour; `packer build -only 'slurm-gpu.*' packer/` builds one flavour (README.md).

# Driver, CUDA, NCCL, EFA, aws-ofi-nccl, GDRCopy on stock Ubuntu / Amazon Linux.
build {
  name = "base-gpu"

  source "amazon-ebs.ubuntu2204-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-ubuntu2204-x86_64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "ubuntu2204-x86_64", Name = "trainstack-base-gpu-ubuntu2204-x86_64" })
  }

  source "amazon-ebs.ubuntu2204-arm64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-ubuntu2204-arm64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "ubuntu2204-arm64", Name = "trainstack-base-gpu-ubuntu2204-arm64" })
  }

  source "amazon-ebs.ubuntu2404-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-ubuntu2404-x86_64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "ubuntu2404-x86_64", Name = "trainstack-base-gpu-ubuntu2404-x86_64" })
  }

  source "amazon-ebs.ubuntu2404-arm64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-ubuntu2404-arm64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "ubuntu2404-arm64", Name = "trainstack-base-gpu-ubuntu2404-arm64" })
  }

  source "amazon-ebs.al2023-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-al2023-x86_64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "al2023-x86_64", Name = "trainstack-base-gpu-al2023-x86_64" })
  }

  source "amazon-ebs.al2023-arm64" {
    ami_name        = "trainstack-${var.stack_id}-base-gpu-al2023-arm64-${local.timestamp}"
    ami_description = "trainstack base-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "base-gpu", "trainstack:source" = "al2023-arm64", Name = "trainstack-base-gpu-al2023-arm64" })
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
    extra_arguments  = concat(local.ansible_common_args, ["-e", "image_flavour=base-gpu", "-e", "image_build_name=${source.name}", "--become"])
  }

  post-processors {
    post-processor "manifest" {
      output      = "${var.output_dir}/packer-manifest.json"
      strip_path  = true
      custom_data = { stack = var.stack_id, flavour = "base-gpu", revision = var.source_revision }
    }
    post-processor "shell-local" {
      environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
      inline           = ["python3 ${local.packer_dir}/scripts/ami_finalize.py --manifest ${var.output_dir}/packer-manifest.json --imds-support v2.0"]
    }
  }
}

# base-gpu plus Slurm and enroot/pyxis.
build {
  name = "slurm-gpu"

  source "amazon-ebs.ubuntu2204-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-ubuntu2204-x86_64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "ubuntu2204-x86_64", Name = "trainstack-slurm-gpu-ubuntu2204-x86_64" })
  }

  source "amazon-ebs.ubuntu2204-arm64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-ubuntu2204-arm64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "ubuntu2204-arm64", Name = "trainstack-slurm-gpu-ubuntu2204-arm64" })
  }

  source "amazon-ebs.ubuntu2404-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-ubuntu2404-x86_64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "ubuntu2404-x86_64", Name = "trainstack-slurm-gpu-ubuntu2404-x86_64" })
  }

  source "amazon-ebs.ubuntu2404-arm64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-ubuntu2404-arm64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "ubuntu2404-arm64", Name = "trainstack-slurm-gpu-ubuntu2404-arm64" })
  }

  source "amazon-ebs.al2023-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-al2023-x86_64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "al2023-x86_64", Name = "trainstack-slurm-gpu-al2023-x86_64" })
  }

  source "amazon-ebs.al2023-arm64" {
    ami_name        = "trainstack-${var.stack_id}-slurm-gpu-al2023-arm64-${local.timestamp}"
    ami_description = "trainstack slurm-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "slurm-gpu", "trainstack:source" = "al2023-arm64", Name = "trainstack-slurm-gpu-al2023-arm64" })
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
    extra_arguments  = concat(local.ansible_common_args, ["-e", "image_flavour=slurm-gpu", "-e", "image_build_name=${source.name}", "--become"])
  }

  post-processors {
    post-processor "manifest" {
      output      = "${var.output_dir}/packer-manifest.json"
      strip_path  = true
      custom_data = { stack = var.stack_id, flavour = "slurm-gpu", revision = var.source_revision }
    }
    post-processor "shell-local" {
      environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
      inline           = ["python3 ${local.packer_dir}/scripts/ami_finalize.py --manifest ${var.output_dir}/packer-manifest.json --imds-support v2.0"]
    }
  }
}

# The stack's NCCL/EFA layers on the official ParallelCluster AMI of var.pcluster_version.
build {
  name = "pcluster-gpu"

  source "amazon-ebs.pcluster-ubuntu2204-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-ubuntu2204-x86_64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-ubuntu2204-x86_64", Name = "trainstack-pcluster-gpu-pcluster-ubuntu2204-x86_64" })
  }

  source "amazon-ebs.pcluster-ubuntu2204-arm64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-ubuntu2204-arm64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-ubuntu2204-arm64", Name = "trainstack-pcluster-gpu-pcluster-ubuntu2204-arm64" })
  }

  source "amazon-ebs.pcluster-ubuntu2404-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-ubuntu2404-x86_64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-ubuntu2404-x86_64", Name = "trainstack-pcluster-gpu-pcluster-ubuntu2404-x86_64" })
  }

  source "amazon-ebs.pcluster-ubuntu2404-arm64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-ubuntu2404-arm64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-ubuntu2404-arm64", Name = "trainstack-pcluster-gpu-pcluster-ubuntu2404-arm64" })
  }

  source "amazon-ebs.pcluster-al2023-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-al2023-x86_64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-al2023-x86_64", Name = "trainstack-pcluster-gpu-pcluster-al2023-x86_64" })
  }

  source "amazon-ebs.pcluster-al2023-arm64" {
    ami_name        = "trainstack-${var.stack_id}-pcluster-gpu-pcluster-al2023-arm64-${local.timestamp}"
    ami_description = "trainstack pcluster-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "pcluster-gpu", "trainstack:source" = "pcluster-al2023-arm64", Name = "trainstack-pcluster-gpu-pcluster-al2023-arm64" })
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
    extra_arguments  = concat(local.ansible_common_args, ["-e", "image_flavour=pcluster-gpu", "-e", "image_build_name=${source.name}", "--become"])
  }

  post-processors {
    post-processor "manifest" {
      output      = "${var.output_dir}/packer-manifest.json"
      strip_path  = true
      custom_data = { stack = var.stack_id, flavour = "pcluster-gpu", revision = var.source_revision }
    }
    post-processor "shell-local" {
      environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
      inline           = ["python3 ${local.packer_dir}/scripts/ami_finalize.py --manifest ${var.output_dir}/packer-manifest.json --imds-support v2.0"]
    }
  }
}

# The stack's layers on the EKS-optimized accelerated AL2023 AMI of var.eks_kubernetes_version.
build {
  name = "eks-gpu"

  source "amazon-ebs.eks-al2023-x86_64" {
    ami_name        = "trainstack-${var.stack_id}-eks-gpu-eks-al2023-x86_64-${local.timestamp}"
    ami_description = "trainstack eks-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "eks-gpu", "trainstack:source" = "eks-al2023-x86_64", Name = "trainstack-eks-gpu-eks-al2023-x86_64" })
  }

  source "amazon-ebs.eks-al2023-arm64" {
    ami_name        = "trainstack-${var.stack_id}-eks-gpu-eks-al2023-arm64-${local.timestamp}"
    ami_description = "trainstack eks-gpu image, stack ${var.stack_id}, revision ${var.source_revision}"
    tags            = merge(local.common_tags, { "trainstack:flavour" = "eks-gpu", "trainstack:source" = "eks-al2023-arm64", Name = "trainstack-eks-gpu-eks-al2023-arm64" })
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
    extra_arguments  = concat(local.ansible_common_args, ["-e", "image_flavour=eks-gpu", "-e", "image_build_name=${source.name}", "--become"])
  }

  post-processors {
    post-processor "manifest" {
      output      = "${var.output_dir}/packer-manifest.json"
      strip_path  = true
      custom_data = { stack = var.stack_id, flavour = "eks-gpu", revision = var.source_revision }
    }
    post-processor "shell-local" {
      environment_vars = ["AWS_REGION=${var.aws_region}", "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}"]
      inline           = ["python3 ${local.packer_dir}/scripts/ami_finalize.py --manifest ${var.output_dir}/packer-manifest.json --imds-support v2.0"]
    }
  }
}
