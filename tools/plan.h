/* plan.h - the `mpmd plan` command (tools/plan.c). */
#ifndef MPMD_TOOL_PLAN_H
#define MPMD_TOOL_PLAN_H

/* Run `mpmd plan ...` (argv[1] is "plan"); returns the exit status. */
int tool_plan(int argc, char **argv);

#endif
