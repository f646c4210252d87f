/* arena.h - static memory planning from value lifetimes.
 *
 * A program is a sequence of positions (one per instruction). Each planned
 * value is defined at one position and last used at another; the planner
 * gives every value an offset in one arena so that values alive at the same
 * time never overlap, and a dead value's bytes are reused. A value may take
 * over the block of a value that dies at its definition (an in-place op).
 * The same planner serves the one-rank loop and the per-rank programs.
 */
#ifndef MPMD_ARENA_H
#define MPMD_ARENA_H

#include <stddef.h>

#define MPMD_ARENA_ALIGN 64

typedef struct mpmd_arena_item {
    size_t bytes; /* 0: needs no memory */
    int def;      /* position where it is written first */
    int last;     /* last position that reads it (>= def) */
    int alias;    /* index of an item dying at `def` whose block this one takes over, or -1 */
} mpmd_arena_item;

/* Assign offsets[i] for every item; returns the arena size in bytes, or
 * (size_t)-1 when out of memory. Positions run from 0 to npos-1. */
size_t mpmd_arena_plan(int n, const mpmd_arena_item *items, int npos, size_t *offsets);

#endif
