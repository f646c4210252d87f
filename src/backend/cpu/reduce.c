/* Placeholder until the reduce kernels land. */
#include "cpu.h"
const mpmd_cpu_entry mpmd_cpu_reduce_kernels[] = {{0}};
