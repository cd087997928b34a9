/*
 * OpenAI-style error bodies, {"error":{"message","type","code"}}, for every
 * error the dataplane answers itself, and the SSE error event that ends a
 * stream cut by a timeout or an upstream failure. Pure functions; any
 * thread.
 */
#ifndef SY_DATAPLANE_ERRORS_H
#define SY_DATAPLANE_ERRORS_H

#include <stddef.h>

/* The OpenAI error type for an HTTP status ("invalid_request_error", ...). */
const char *dp_error_type(int status);

/* A new NUL-terminated JSON body (caller frees), or NULL on allocation failure. */
char *dp_error_body(int status, const char *code, const char *message);

/* Writes "data: {"error":{...}}\n\n" into buf. Returns its length, or 0 if it does not fit. */
size_t dp_error_sse_event(char *buf, size_t cap, int status, const char *code, const char *message);

#endif
