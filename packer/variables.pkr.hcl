# Variables of every build. The stack defaults to the collection's current one (stacks/current); `make image-*`
# passes the stack's values, so a stack change never needs a template change.

variable "stack_id" {
  type        = string
  default     = ""
  description = "Stack file stacks/<stack_id>.yml whose versions the image installs (empty: stacks/current)."
}

variable "source_revision" {
  type        = string
  default     = "unknown"
  description = "Git revision of this repository, recorded in /etc/trainstack/image.json."
}

variable "output_dir" {
  type        = string
  default     = "build/image"
  description = "Where Packer's manifest, image.json and the local rootfs tarball are written."
}

variable "ansible_playbook" {
  type        = string
  default     = "ansible-playbook"
  description = "ansible-playbook to run (the repository's .venv/bin/ansible-playbook under make)."
}

variable "artifact_mirror_url" {
  type        = string
  default     = ""
  description = "Mirror base URL (http(s)://, file:// or s3://) replacing vendor downloads; empty: upstream."
}

variable "pytorch_testcases" {
  type        = list(string)
  default     = null
  description = "Test cases (pytorch/fsdp) whose environments the pytorch role bakes into the image at /opt/trainstack/envs/<case>-<key>, from each one's lock for the image (the lab's in the local image); null: every test case of the catalog, []: none. Listed in image.json (testcase_envs)."

  # Packer 1.6.6 has no regex(): a name is one when the pattern, replaced, leaves nothing of it.
  validation {
    condition     = length([for c in(var.pytorch_testcases == null ? [] : var.pytorch_testcases) : c if regex_replace(c, "^[A-Za-z0-9][A-Za-z0-9_-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$", "") != ""]) == 0
    error_message = "The pytorch_testcases must be test case names such as pytorch/fsdp (framework/case: letters, digits, '_', '-', '.')."
  }
}

# ---------------------------------------------------------------- AWS

variable "flavour" {
  type        = string
  default     = "slurm-gpu"
  description = "Flavour the AMIs of the ami build are provisioned as; its base AMIs are local.amazon_flavour_bases[flavour] (builds.amazon.pkr.hcl)."

  validation {
    condition     = contains(["base-gpu", "slurm-gpu", "pcluster-gpu", "eks-gpu", "pcs-gpu", "batch-gpu"], var.flavour)
    error_message = "The flavour must be one of base-gpu, slurm-gpu, pcluster-gpu, eks-gpu, pcs-gpu, batch-gpu."
  }
}

variable "aws_region" {
  type    = string
  default = "us-east-1"
}

variable "ami_copy_regions" {
  type        = list(string)
  default     = []
  description = "Regions the finished AMI is copied to (encrypted with each region's default key)."
}

variable "kms_key_id" {
  type        = string
  default     = ""
  description = "KMS key (id, ARN or alias/...) encrypting the build volume and the AMI's snapshots; empty: the account's default EBS key."
}

variable "ami_copy_kms_key_ids" {
  type        = map(string)
  default     = {}
  description = "Region -> KMS key for the AMI copies of ami_copy_regions; a region left out uses its default EBS key."
}

variable "ssh_source_cidrs" {
  type        = list(string)
  default     = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
  description = "CIDRs Packer's temporary security group admits to SSH on the build instance; the default admits private addresses only (a build host inside the VPC). From outside, give your build host's public /32 and ssh_interface=public_ip."

  validation {
    condition     = length(var.ssh_source_cidrs) > 0 && length([for c in var.ssh_source_cidrs : c if can(cidrnetmask(c))]) == length(var.ssh_source_cidrs)
    error_message = "The ssh_source_cidrs must be a non-empty list of IPv4 CIDRs (10.0.0.0/8, 203.0.113.7/32)."
  }
}

variable "ssh_interface" {
  type        = string
  default     = "private_ip"
  description = "Address Packer connects to the build instance by: private_ip (default, matches ssh_source_cidrs' private ranges), public_ip, private_dns, public_dns."

  validation {
    condition     = contains(["private_ip", "public_ip", "private_dns", "public_dns"], var.ssh_interface)
    error_message = "The ssh_interface must be one of private_ip, public_ip, private_dns, public_dns."
  }
}

variable "root_volume_gb" {
  type        = number
  default     = 100
  description = "Size of the encrypted gp3 root volume of the build instance and the AMI."
}

variable "root_volume_iops" {
  type    = number
  default = 3000
}

variable "root_volume_throughput" {
  type    = number
  default = 250
}

variable "instance_type_x86_64" {
  type        = string
  default     = "c6i.4xlarge"
  description = "Build instance for x86_64 images (no GPU needed: DKMS builds against the image's kernel)."
}

variable "instance_type_arm64" {
  type    = string
  default = "c7g.4xlarge"
}

variable "subnet_id" {
  type    = string
  default = ""
}

variable "ssh_timeout" {
  type    = string
  default = "20m"
}

variable "pcluster_version" {
  type        = string
  default     = "3.16.1"
  description = "ParallelCluster release whose official AMI the pcluster-gpu flavour starts from."
}

variable "eks_kubernetes_version" {
  type        = string
  default     = "1.34"
  description = "Kubernetes version whose EKS-optimized accelerated AL2023 AMI the eks-gpu flavour starts from."
}

variable "extra_tags" {
  type    = map(string)
  default = {}
}

# Test hooks: point the amazon-ebs builder at moto's EC2 server (tests/integration/image/test_packer_moto.py).
variable "custom_endpoint_ec2" {
  type    = string
  default = ""
}

# Empty: the instance's address. Tests set 127.0.0.1 and a closed port so that nothing is sent to the address
# moto invents for its fake instance.
variable "ssh_host" {
  type    = string
  default = ""
}

variable "ssh_port" {
  type    = number
  default = 22
}

variable "skip_credential_validation" {
  type    = bool
  default = false
}

# ---------------------------------------------------------------- local (LXC) image

variable "wheelhouse" {
  type        = string
  default     = ""
  description = "Controller directory of wheels (make wheelhouse) the pytorch role installs from with --no-index; empty: the stack's wheel and the package index."
}

variable "local_flavour" {
  type        = string
  default     = "slurm-gpu"
  description = "Flavour the local Debian 12 image is provisioned as (GPU steps skip themselves without a GPU)."
}

variable "lxc_suite" {
  type    = string
  default = "bookworm"
}

variable "lxc_mirror" {
  type    = string
  default = "http://deb.debian.org/debian"
}

variable "lxc_cache_dir" {
  type        = string
  default     = "/var/cache/trainstack/image"
  description = "Cached debootstrap root filesystems and the apt/pip caches bind-mounted into the build."
}

variable "lxc_cpu_weight" {
  type        = number
  default     = 100
  description = "CPU weight of the build container against the host's other work (1-10000, cgroup v2 scale; 100 is an ordinary process's). Each container is its own control group, so a niced make does not lower the build's own processes: a lower weight does."

  validation {
    condition     = var.lxc_cpu_weight >= 1 && var.lxc_cpu_weight <= 10000
    error_message = "The lxc_cpu_weight value must be 1..10000 (cgroup v2 cpu.weight scale)."
  }
}

variable "image_stage_plan" {
  type        = string
  default     = ""
  description = "Stage plan of the local build (make image-local writes it: scripts/image_stages.py): the build container starts from the snapshot it names and the playbook applies only the stages after it, snapshotting each. Empty: every stage runs on the debootstrap base, nothing is snapshotted."

  validation {
    condition     = var.image_stage_plan == "" ? true : fileexists(var.image_stage_plan)
    error_message = "The image_stage_plan must be empty or a stage plan file that exists (make image-local writes it: scripts/image_stages.py)."
  }
}

variable "lxc_container_name" {
  type    = string
  default = "ts-image-build"
}
