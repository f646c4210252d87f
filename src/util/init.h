/* init.h - deterministic initialisers for parameters and variables. */
#ifndef MPMD_INIT_H
#define MPMD_INIT_H

#include "mpmd.h"

/* Fill `n` elements of a tensor of type t (f32 or i32) named `name`. Each
 * element is a pure function of (seed, name, index). */
void mpmd_init_fill(void *dst, const mpmd_type *t, const char *name, mpmd_init init, uint64_t seed);

#endif
