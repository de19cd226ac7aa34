/* STAND-IN for the aws-ofi-nccl plugin (tests only). Not a NCCL net plugin: it exports no ncclNet_v* symbol, so
 * a real NCCL never mistakes it for one. It links the libfabric it was configured with and reports that
 * library's version, which is what the molecule verifier reads through the dynamic linker. */
#include <rdma/fabric.h>

unsigned int trainstack_standin_fi_version(void) { return fi_version(); }
