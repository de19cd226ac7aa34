# Local image: the same playbook applied to a Debian 12 LXC container, exported as a root filesystem tarball that
# the lab boots (`make lab-up LAB_BASE_IMAGE=<its packer-manifest.json>`, docs/image-factory.md).
#
# Provisioning path: Packer 1.6.6's ansible provisioner (through its SSH proxy, which offers only ssh-rsa host keys)
# hangs at "Gathering Facts" against this builder even with ssh-rsa allowed, so a shell-local provisioner runs the
# same playbook with the community.general.lxc connection against the build container by name.
source "lxc" "debian12" {
  # Unused by lxc-create in Packer 1.6.6 (our template writes the container config), but required by the builder.
  config_file         = "${local.packer_dir}/lxc/lxc.conf"
  template_name       = "${local.packer_dir}/lxc/lxc-trainstack-debian"
  template_parameters = concat(["--suite", var.lxc_suite, "--mirror", var.lxc_mirror, "--cache-dir", var.lxc_cache_dir, "--cpu-weight", var.lxc_cpu_weight], local.lxc_rootfs_args)
  container_name      = var.lxc_container_name
  output_directory    = "${local.local_outdir}/packer"
  target_runlevel     = 3
  init_timeout        = "120s"
}

build {
  name    = "local"
  sources = ["source.lxc.debian12"]

  provisioner "shell-local" {
    environment_vars = local.ansible_env
    command          = "${var.ansible_playbook} -i '${var.lxc_container_name},' -c community.general.lxc ${local.repo_root}/playbooks/build_image.yml ${join(" ", local.ansible_common_args)} -e image_flavour=${var.local_flavour} -e image_build_name=local-debian12 -e image_host_ca_certs=true -e image_cache_mounted=true -e image_json_dest=${local.local_outdir}/image.json -e image_stage_plan=${var.image_stage_plan}"
    inline_shebang   = "/bin/sh -e"
    inline           = []
  }

  # Let the booted image start its services (the template blocked them during the build).
  provisioner "shell-local" {
    inline = ["lxc-attach -n ${var.lxc_container_name} -- rm -f /usr/sbin/policy-rc.d"]
  }

  post-processors {
    post-processor "manifest" {
      output      = "${local.local_outdir}/packer-manifest.json"
      strip_path  = false
      custom_data = { stack = local.stack_id, flavour = var.local_flavour, revision = var.source_revision, lab_rootfs = local.lab_rootfs }
    }
    post-processor "shell-local" {
      inline = ["${local.packer_dir}/scripts/lab-rootfs.sh ${local.local_outdir}/packer/rootfs.tar.gz ${local.lab_rootfs}"]
    }
  }
}
