# The amazon-ebs source: one for every image, parameterised by the tables below. A build turns it into one image
# per base AMI and architecture with a `dynamic "source"` block (builds.amazon.pkr.hcl), which names it
# `<base>-<arch>` and adds what differs per image: login user and root device (its OS family's), instance type,
# source AMI filter, AMI name and tags. Adding a base AMI, an architecture or an OS family is a table entry here,
# not a new source (README.md).
#
# Source AMIs are found by name filter and owner (Packer 1.6.6 has no SSM data source; on current Packer an
# `amazon-parameterstore` data source can replace the filters, see README.md).
# IMDSv2: Packer 1.6.6 rejects `metadata_options` and `imds_support` (packer validate), so each build's first
# provisioner requires tokens on the build instance (scripts/instance_imdsv2.py) and a post-processor marks the
# finished AMI ImdsSupport=v2.0 (scripts/ami_finalize.py); see README.md.
# Encryption: root volumes and AMIs are encrypted with var.kms_key_id (empty: the account's default EBS key).
# SSH: Packer's temporary security group admits var.ssh_source_cidrs only (private ranges by default), and
# Packer connects over var.ssh_interface (the private address by default: build from inside the VPC).

locals {
  # What an OS family decides: the login user and the root device name (the root volume's mapping is
  # written once, in the build's dynamic source block, with the family's device).
  amazon_families = {
    ubuntu = { ssh_username = "ubuntu", root_device = "/dev/sda1" }
    al2023 = { ssh_username = "ec2-user", root_device = "/dev/xvda" }
  }

  # Build instance per architecture (no GPU needed: DKMS builds against the image's kernel).
  amazon_instance_types = {
    x86_64 = var.instance_type_x86_64
    arm64  = var.instance_type_arm64
  }

  # Base AMIs images start from: OS family, owner, and the AMI name filter of each architecture.
  amazon_bases = {
    ubuntu2204 = {
      family = "ubuntu"
      owner  = local.ubuntu_owner
      ami_names = {
        x86_64 = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
        arm64  = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-arm64-server-*"
      }
    }
    ubuntu2404 = {
      family = "ubuntu"
      owner  = local.ubuntu_owner
      ami_names = {
        x86_64 = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
        arm64  = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*"
      }
    }
    al2023 = {
      family = "al2023"
      owner  = local.amazon_owner
      ami_names = {
        x86_64 = "al2023-ami-2023.*-kernel-*-x86_64"
        arm64  = "al2023-ami-2023.*-kernel-*-arm64"
      }
    }
    pcluster-ubuntu2204 = {
      family = "ubuntu"
      owner  = local.pcluster_owner
      ami_names = {
        x86_64 = "${local.pcluster_prefix}-ubuntu-2204-lts-hvm-x86_64*"
        arm64  = "${local.pcluster_prefix}-ubuntu-2204-lts-hvm-arm64*"
      }
    }
    pcluster-ubuntu2404 = {
      family = "ubuntu"
      owner  = local.pcluster_owner
      ami_names = {
        x86_64 = "${local.pcluster_prefix}-ubuntu-2404-lts-hvm-x86_64*"
        arm64  = "${local.pcluster_prefix}-ubuntu-2404-lts-hvm-arm64*"
      }
    }
    pcluster-al2023 = {
      family = "al2023"
      owner  = local.pcluster_owner
      ami_names = {
        x86_64 = "${local.pcluster_prefix}-amzn2023-hvm-x86_64*"
        arm64  = "${local.pcluster_prefix}-amzn2023-hvm-arm64*"
      }
    }
    eks-al2023 = {
      family = "al2023"
      owner  = local.eks_owner
      ami_names = {
        x86_64 = "amazon-eks-node-al2023-x86_64-nvidia-${var.eks_kubernetes_version}-*"
        arm64  = "amazon-eks-node-al2023-arm64-nvidia-${var.eks_kubernetes_version}-*"
      }
    }
  }

  # "<base>-<arch>" -> what every image of that base and architecture gets, whatever its flavour.
  amazon_sources = merge([
    for base, spec in local.amazon_bases : {
      for arch, ami_name in spec.ami_names : "${base}-${arch}" => {
        base          = base
        family        = spec.family
        ssh_username  = local.amazon_families[spec.family].ssh_username
        root_device   = local.amazon_families[spec.family].root_device
        instance_type = local.amazon_instance_types[arch]
        owners        = [spec.owner]
        ami_filters = {
          name                = ami_name
          architecture        = arch
          root-device-type    = "ebs"
          virtualization-type = "hvm"
        }
      }
    }
  ]...)
}

# The one amazon-ebs source: every setting that is the same for all images. What differs per OS family (login
# user, root device) and per image is set by the build's `dynamic "source"` block from local.amazon_sources.
source "amazon-ebs" "image" {
  region                                = var.aws_region
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
}
