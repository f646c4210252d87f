/* Placeholder until the optim kernels land. */
#include "cpu.h"
const mpmd_cpu_entry mpmd_cpu_optim_kernels[] = {{0}};
