/* CPU kernels of the structural ops that compute something: a stage marker
 * is the identity (a copy unless the planner made it in place). */
#include "cpu.h"

#include <string.h>

static int k_identity(const mpmd_kargs *a) {
    if (a->out != a->in[0]) memcpy(a->out, a->in[0], mpmd_type_bytes(&a->node->type));
    return 0;
}

const mpmd_kernel mpmd_cpu_core_kernels[] = {
    {&mpmd_op_stage_marker, k_identity, NULL, MPMD_KERNEL_BF16 | MPMD_KERNEL_F16},
    {0},
};
