/* The CPU backend's kernel lookup: one table per op family. */
#include "cpu.h"

static const mpmd_cpu_entry *const tables[] = {
    mpmd_cpu_core_kernels, mpmd_cpu_elementwise_kernels, mpmd_cpu_reduce_kernels,
    mpmd_cpu_nn_kernels,   mpmd_cpu_optim_kernels,
};

const mpmd_cpu_entry *mpmd_cpu_find(const mpmd_op_desc *op) {
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (const mpmd_cpu_entry *e = tables[t]; e->op; e++)
            if (e->op == op) return e;
    return NULL;
}
