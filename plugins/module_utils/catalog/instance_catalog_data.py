# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Generated from stacks/instance_types.yml by `make instance-catalog`; do not edit by hand.

Ansible ships module_utils to targets as Python only, so the catalog travels in this form; a unit
test fails when it differs from the YAML."""

from __future__ import annotations

import json
from typing import Any

_TEXT = r"""
{
 "defaults": {
  "accelerator": null,
  "accelerator_count": 0,
  "arch": "x86_64",
  "bf16_dense_flops": null,
  "efa_interfaces": 0,
  "env": {
   "NCCL_SOCKET_IFNAME": "^docker,lo,veth"
  },
  "gpu_arch": null,
  "gpu_count": 0,
  "gpu_generation": null,
  "gpu_memory_mib": null,
  "gpu_model": null,
  "gpudirect_rdma": false,
  "health": {
   "disk_min_free_pct": 10,
   "disk_paths": [
    "/",
    "/tmp"
   ],
   "gpu_memory_tolerance": 0.05,
   "memlock_kib": "unlimited",
   "mounts": [
    "/fsx"
   ]
  },
  "host_memory_gib": null,
  "min_memory_gib": 1,
  "nccl_allreduce_busbw_gbps": null,
  "nvidia": true,
  "nvlink_links_per_gpu": 0,
  "nvswitch": false,
  "vcpus": null
 },
 "families": {
  "g4dn": {
   "env": {
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_75",
   "gpu_generation": "turing",
   "gpu_model": "T4",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g4/"
   ]
  },
  "g5": {
   "env": {
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_86",
   "gpu_generation": "ampere",
   "gpu_model": "A10G",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g5/"
   ]
  },
  "g5g": {
   "arch": "aarch64",
   "gpu_arch": "sm_75",
   "gpu_generation": "turing",
   "gpu_model": "T4G",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g5g/"
   ]
  },
  "g6": {
   "bf16_dense_flops": 121000000000000.0,
   "env": {
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_89",
   "gpu_generation": "ada",
   "gpu_model": "L4",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g6/",
    "https://www.nvidia.com/en-us/data-center/l4/"
   ]
  },
  "g6e": {
   "bf16_dense_flops": 362050000000000.0,
   "env": {
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_89",
   "gpu_generation": "ada",
   "gpu_model": "L40S",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g6e/",
    "https://www.nvidia.com/en-us/data-center/l40s/"
   ]
  },
  "gr6": {
   "bf16_dense_flops": 121000000000000.0,
   "gpu_arch": "sm_89",
   "gpu_generation": "ada",
   "gpu_model": "L4",
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/g6/",
    "https://www.nvidia.com/en-us/data-center/l4/"
   ]
  },
  "p3": {
   "gpu_arch": "sm_70",
   "gpu_generation": "volta",
   "gpu_model": "V100",
   "nvlink_links_per_gpu": 6,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p3/"
   ]
  },
  "p3dn": {
   "env": {
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_70",
   "gpu_generation": "volta",
   "gpu_model": "V100",
   "nvlink_links_per_gpu": 6,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p3/",
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html"
   ]
  },
  "p4d": {
   "bf16_dense_flops": 312000000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_80",
   "gpu_generation": "ampere",
   "gpu_model": "A100",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 12,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p4/",
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
   ]
  },
  "p4de": {
   "bf16_dense_flops": 312000000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_80",
   "gpu_generation": "ampere",
   "gpu_model": "A100",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 12,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p4/"
   ]
  },
  "p5": {
   "bf16_dense_flops": 989400000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa",
    "NCCL_BUFFSIZE": "8388608"
   },
   "gpu_arch": "sm_90",
   "gpu_generation": "hopper",
   "gpu_model": "H100",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p5/",
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html",
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
   ]
  },
  "p5e": {
   "bf16_dense_flops": 989400000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa",
    "NCCL_BUFFSIZE": "8388608"
   },
   "gpu_arch": "sm_90",
   "gpu_generation": "hopper",
   "gpu_model": "H200",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p5/",
    "https://www.nvidia.com/en-us/data-center/h200/"
   ]
  },
  "p5en": {
   "bf16_dense_flops": 989400000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa",
    "NCCL_BUFFSIZE": "8388608"
   },
   "gpu_arch": "sm_90",
   "gpu_generation": "hopper",
   "gpu_model": "H200",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p5/",
    "https://www.nvidia.com/en-us/data-center/h200/"
   ]
  },
  "p6-b200": {
   "bf16_dense_flops": 2250000000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_100",
   "gpu_generation": "blackwell",
   "gpu_model": "B200",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p6/",
    "https://www.nvidia.com/en-us/data-center/hgx/"
   ]
  },
  "p6-b300": {
   "bf16_dense_flops": 2250000000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_103",
   "gpu_generation": "blackwell",
   "gpu_model": "B300",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "nvswitch": true,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p6/",
    "https://www.nvidia.com/en-us/data-center/hgx/"
   ]
  },
  "p6e-gb200": {
   "arch": "aarch64",
   "bf16_dense_flops": 2500000000000000.0,
   "env": {
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_PROVIDER": "efa"
   },
   "gpu_arch": "sm_100",
   "gpu_generation": "blackwell",
   "gpu_model": "B200",
   "gpudirect_rdma": true,
   "nvlink_links_per_gpu": 18,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/p6/",
    "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
   ]
  },
  "trn1": {
   "accelerator": "trainium",
   "env": {
    "FI_PROVIDER": "efa"
   },
   "nvidia": false,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/trn1/"
   ]
  },
  "trn2": {
   "accelerator": "trainium2",
   "env": {
    "FI_PROVIDER": "efa"
   },
   "nvidia": false,
   "sources": [
    "https://aws.amazon.com/ec2/instance-types/trn2/"
   ]
  }
 },
 "schema": 1,
 "types": {
  "g4dn.12xlarge": {
   "efa_interfaces": 1,
   "gpu_count": 4,
   "gpu_memory_mib": 15360,
   "host_memory_gib": 192,
   "min_memory_gib": 180,
   "vcpus": 48
  },
  "g5.48xlarge": {
   "efa_interfaces": 1,
   "gpu_count": 8,
   "gpu_memory_mib": 22888,
   "host_memory_gib": 768,
   "min_memory_gib": 730,
   "nccl_allreduce_busbw_gbps": 8,
   "vcpus": 192
  },
  "g5g.16xlarge": {
   "gpu_count": 2,
   "gpu_memory_mib": 15360,
   "host_memory_gib": 128,
   "min_memory_gib": 120,
   "vcpus": 64
  },
  "g6.48xlarge": {
   "efa_interfaces": 1,
   "gpu_count": 8,
   "gpu_memory_mib": 22888,
   "host_memory_gib": 768,
   "min_memory_gib": 730,
   "vcpus": 192
  },
  "g6e.48xlarge": {
   "efa_interfaces": 4,
   "gpu_count": 8,
   "gpu_memory_mib": 45776,
   "host_memory_gib": 1536,
   "min_memory_gib": 1450,
   "nccl_allreduce_busbw_gbps": 28,
   "vcpus": 192
  },
  "gr6.8xlarge": {
   "gpu_count": 1,
   "gpu_memory_mib": 22888,
   "host_memory_gib": 256,
   "min_memory_gib": 240,
   "vcpus": 32
  },
  "lab": {
   "env": {
    "GLOO_SOCKET_IFNAME": "eth0",
    "OMP_NUM_THREADS": "1"
   },
   "health": {
    "disk_min_free_pct": 5,
    "memlock_kib": 4096,
    "mounts": [
     "/shared"
    ]
   },
   "nccl_allreduce_busbw_gbps": 0.01
  },
  "local": {
   "env": {
    "NCCL_NVLS_ENABLE": "0"
   },
   "gpu_count": null,
   "health": {
    "disk_paths": [
     "/"
    ],
    "memlock_kib": 0,
    "mounts": []
   }
  },
  "p3.16xlarge": {
   "gpu_count": 8,
   "gpu_memory_mib": 16384,
   "host_memory_gib": 488,
   "min_memory_gib": 460,
   "vcpus": 64
  },
  "p3dn.24xlarge": {
   "efa_interfaces": 1,
   "gpu_count": 8,
   "gpu_memory_mib": 32768,
   "host_memory_gib": 768,
   "min_memory_gib": 730,
   "vcpus": 96
  },
  "p4d.24xlarge": {
   "efa_interfaces": 4,
   "gpu_count": 8,
   "gpu_memory_mib": 40960,
   "host_memory_gib": 1152,
   "min_memory_gib": 1100,
   "nccl_allreduce_busbw_gbps": 36,
   "vcpus": 96
  },
  "p4de.24xlarge": {
   "efa_interfaces": 4,
   "gpu_count": 8,
   "gpu_memory_mib": 81920,
   "host_memory_gib": 1152,
   "min_memory_gib": 1100,
   "nccl_allreduce_busbw_gbps": 36,
   "vcpus": 96
  },
  "p5.48xlarge": {
   "efa_interfaces": 32,
   "gpu_count": 8,
   "gpu_memory_mib": 81920,
   "host_memory_gib": 2048,
   "min_memory_gib": 1950,
   "nccl_allreduce_busbw_gbps": 280,
   "vcpus": 192
  },
  "p5e.48xlarge": {
   "efa_interfaces": 32,
   "gpu_count": 8,
   "gpu_memory_mib": 144384,
   "host_memory_gib": 2048,
   "min_memory_gib": 1950,
   "nccl_allreduce_busbw_gbps": 280,
   "vcpus": 192
  },
  "p5en.48xlarge": {
   "efa_interfaces": 16,
   "gpu_count": 8,
   "gpu_memory_mib": 144384,
   "host_memory_gib": 2048,
   "min_memory_gib": 1950,
   "nccl_allreduce_busbw_gbps": 300,
   "vcpus": 192
  },
  "p6-b200.48xlarge": {
   "efa_interfaces": 8,
   "gpu_count": 8,
   "gpu_memory_mib": 183359,
   "host_memory_gib": 2048,
   "min_memory_gib": 1950,
   "nccl_allreduce_busbw_gbps": 300,
   "vcpus": 192
  },
  "p6-b300.48xlarge": {
   "efa_interfaces": 16,
   "gpu_count": 8,
   "gpu_memory_mib": 274658,
   "host_memory_gib": 4096,
   "min_memory_gib": 3890,
   "vcpus": 192
  },
  "p6e-gb200.36xlarge": {
   "efa_interfaces": 4,
   "gpu_count": 4,
   "gpu_memory_mib": 189471,
   "host_memory_gib": 960,
   "min_memory_gib": 910,
   "vcpus": 144
  },
  "trn1.32xlarge": {
   "accelerator_count": 16,
   "efa_interfaces": 8,
   "host_memory_gib": 512,
   "min_memory_gib": 485,
   "vcpus": 128
  },
  "trn2.48xlarge": {
   "accelerator_count": 16,
   "efa_interfaces": 16,
   "host_memory_gib": 2048,
   "min_memory_gib": 1950,
   "vcpus": 192
  }
 }
}
"""

CATALOG: dict[str, Any] = json.loads(_TEXT)
