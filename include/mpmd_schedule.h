/* Placeholder until the schedule module lands. */
#ifndef MPMD_SCHEDULE_H
#define MPMD_SCHEDULE_H
#endif
