/* Placeholder until the elementwise kernels land. */
#include "cpu.h"
const mpmd_cpu_entry mpmd_cpu_elementwise_kernels[] = {{0}};
