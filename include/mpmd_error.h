/* mpmd_error.h - status codes and the error record shared by every module.
 *
 * Every fallible function of mpmd either returns an mpmd_status or keeps its
 * first error on the object it works on (the graph, the executor). An error
 * message says what went wrong and where: the function, the operand shapes,
 * the numbers that disagree. The library never prints and never exits; a
 * program prints the message and exits non-zero.
 */
#ifndef MPMD_ERROR_H
#define MPMD_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what it exports is exactly
 * what its public headers declare between MPMD_API_BEGIN and MPMD_API_END
 * (checked by a test), never its internals. */
#if defined(__GNUC__)
#define MPMD_API_BEGIN _Pragma("GCC visibility push(default)")
#define MPMD_API_END _Pragma("GCC visibility pop")
#else
#define MPMD_API_BEGIN
#define MPMD_API_END
#endif

MPMD_API_BEGIN

typedef enum mpmd_status {
    MPMD_OK = 0,
    MPMD_ERR_INVALID = 1, /* a bad argument: a count, a name, a parameter */
    MPMD_ERR_SHAPE = 2,   /* operand shapes or dtypes that do not fit an op */
    MPMD_ERR_NOMEM = 3,   /* an allocation failed */
    MPMD_ERR_IO = 4,      /* a file could not be read or written */
    MPMD_ERR_FORMAT = 5,  /* a file or text that does not parse */
    MPMD_ERR_NUMERIC = 6, /* NaN or Inf where a finite number is required */
    MPMD_ERR_RUNTIME = 7, /* a failure while running a program */
    MPMD_ERR_SCHEDULE = 8 /* a schedule that breaks its rules or deadlocks */
} mpmd_status;

/* Capacity of an error message, terminator included. */
#define MPMD_ERROR_MSG_MAX 1024

/* An error record a caller owns (usually on the stack). Functions that take
 * an `mpmd_error *err` fill it on failure; NULL is allowed and means "I only
 * want the status". On success it is left untouched. */
typedef struct mpmd_error {
    mpmd_status code;
    char msg[MPMD_ERROR_MSG_MAX];
} mpmd_error;

/* The name of a status code, e.g. "shape error". */
const char *mpmd_status_str(mpmd_status s);

/* Fill `err` (if not NULL) with a code and a printf-style message; returns
 * `code` so that a function can `return mpmd_error_set(err, ...)`. */
mpmd_status mpmd_error_set(mpmd_error *err, mpmd_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
