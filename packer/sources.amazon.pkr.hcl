# amazon-ebs sources. Source AMIs are found by name filter and owner (Packer 1.6.6 has no SSM data source;
# on current Packer an `amazon-parameterstore` data source can replace the filters, see README.md).
# ami_name and tags are set per flavour in builds.pkr.hcl, because a build may only add to a source.
# IMDSv2: Packer 1.6.6 rejects `metadata_options` and `imds_support` (packer validate), so each build's first
# provisioner requires tokens on the build instance (scripts/instance_imdsv2.py) and a post-processor marks the
# finished AMI ImdsSupport=v2.0 (scripts/ami_finalize.py); see README.md.
# Encryption: root volumes and AMIs are encrypted with var.kms_key_id (empty: the account's default EBS key).
# SSH: Packer's temporary security group admits var.ssh_source_cidrs only (private ranges by default), and
# Packer connects over var.ssh_interface (the private address by default: build from inside the VPC).

source "amazon-ebs" "ubuntu2204-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.ubuntu_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "ubuntu2204-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-arm64-server-*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.ubuntu_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "ubuntu2404-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.ubuntu_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "ubuntu2404-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.ubuntu_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "al2023-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "al2023-ami-2023.*-kernel-*-x86_64"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.amazon_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "al2023-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "al2023-ami-2023.*-kernel-*-arm64"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.amazon_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-ubuntu2204-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-ubuntu-2204-lts-hvm-x86_64*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-ubuntu2204-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-ubuntu-2204-lts-hvm-arm64*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-ubuntu2404-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-ubuntu-2404-lts-hvm-x86_64*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-ubuntu2404-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ubuntu"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-ubuntu-2404-lts-hvm-arm64*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-al2023-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-amzn2023-hvm-x86_64*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "pcluster-al2023-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "${local.pcluster_prefix}-amzn2023-hvm-arm64*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.pcluster_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "eks-al2023-x86_64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_x86_64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "amazon-eks-node-al2023-x86_64-nvidia-${var.eks_kubernetes_version}-*"
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.eks_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}

source "amazon-ebs" "eks-al2023-arm64" {
  region                                = var.aws_region
  instance_type                         = var.instance_type_arm64
  ssh_username                          = "ec2-user"
  ssh_timeout                           = var.ssh_timeout
  ssh_host                              = var.ssh_host
  ssh_port                              = var.ssh_port
  subnet_id                             = var.subnet_id
  ami_regions                           = var.ami_copy_regions
  encrypt_boot                          = true
  kms_key_id                            = var.kms_key_id
  region_kms_key_ids                    = var.ami_copy_kms_key_ids
  ssh_interface                         = var.ssh_interface
  temporary_security_group_source_cidrs = var.ssh_source_cidrs
  ena_support                           = true
  custom_endpoint_ec2                   = var.custom_endpoint_ec2
  skip_credential_validation            = var.skip_credential_validation
  run_tags                              = local.common_tags
  run_volume_tags                       = local.common_tags
  snapshot_tags                         = local.common_tags

  source_ami_filter {
    filters = {
      name                = "amazon-eks-node-al2023-arm64-nvidia-${var.eks_kubernetes_version}-*"
      architecture        = "arm64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.eks_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }
}
