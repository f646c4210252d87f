/* Status names and the error-record setter (include/mpmd_error.h). */
#include "mpmd_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *mpmd_status_str(mpmd_status s) {
    switch (s) {
    case MPMD_OK: return "ok";
    case MPMD_ERR_INVALID: return "invalid argument";
    case MPMD_ERR_SHAPE: return "shape error";
    case MPMD_ERR_NOMEM: return "out of memory";
    case MPMD_ERR_IO: return "i/o error";
    case MPMD_ERR_FORMAT: return "format error";
    case MPMD_ERR_NUMERIC: return "numeric error";
    case MPMD_ERR_RUNTIME: return "runtime error";
    case MPMD_ERR_SCHEDULE: return "schedule error";
    }
    return "unknown error";
}

mpmd_status mpmd_error_set(mpmd_error *err, mpmd_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}
