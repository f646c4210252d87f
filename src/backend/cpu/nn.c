/* Placeholder until the nn kernels land. */
#include "cpu.h"
const mpmd_cpu_entry mpmd_cpu_nn_kernels[] = {{0}};
