"""roles/nccl_tests: the nccl-tests build on each OS it supports (the role's own files rendered in process, as
a play would: tests/support/roles.py role_templar), and the inputs it refuses."""

from __future__ import annotations

from tests.support import current_stack, input_validation_tests

ROLE = "nccl_tests"
STACK = current_stack()
CAPTURE = ["__nccl_tests_build_packages", "nccl_tests_version", "__nccl_tests_make_args"]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("tests_archs_string", "ubuntu2204", {"nccl_tests_cuda_archs": "sm_90"}, "nccl_tests_cuda_archs"),
    ("tests_archs_compute", "ubuntu2204", {"nccl_tests_cuda_archs": ["compute_90"]}, "nccl_tests_cuda_archs"),
    ("tests_archs_empty", "ubuntu2204", {"nccl_tests_cuda_archs": []}, "nccl_tests_cuda_archs"),
    ("tests_cudart", "ubuntu2204", {"nccl_tests_cudart": "dynamic"}, "nccl_tests_cudart"),
    ("tests_cache_dir", "ubuntu2204", {"nccl_tests_build_cache_dir": "builds"}, "nccl_tests_build_cache_dir"),
]
# (case id, os, variables)
GOOD_INPUT = [
    ("tests_ok", "ubuntu2204", {"nccl_tests_cuda_home": "/", "nccl_tests_nccl_home": "/"}),
    (
        "tests_one_arch_static",
        "ubuntu2204",
        {"nccl_tests_cuda_archs": ["sm_90"], "nccl_tests_cudart": "static"},
    ),
]


def test_nccl_tests_make_arguments(os_values):
    values = os_values["ubuntu2404"]
    assert values["nccl_tests_version"] == STACK["components"]["nccl_tests"]["version"]
    assert values["__nccl_tests_make_args"] == [
        "MPI=1",
        "CUDA_HOME=/usr/local/cuda",
        "NCCL_HOME=/opt/nvidia/nccl",
        "MPI_HOME=/opt/amazon/openmpi",
        # The catalog's GPU architectures of the stack's families with GPUDirect RDMA (p4d, p5*, p6-b200).
        "NVCC_GENCODE=-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_80,code=sm_80"
        " -gencode=arch=compute_90,code=sm_90",
    ]


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
