/*
 * OpenAI-style error bodies, {"error":{"message","type","code"}}, for every
 * error the dataplane answers itself, and the SSE error event that ends a
 * stream cut by a timeout or an upstream failure. Routes of Anthropic's
 * Messages API get Anthropic's shape instead,
 * {"type":"error","error":{"type","message"}} (no code: Anthropic has
 * none; the type says the kind), and their streams an `event: error`.
 * Pure functions; any thread.
 */
#ifndef SY_DATAPLANE_ERRORS_H
#define SY_DATAPLANE_ERRORS_H

#include <stdbool.h>
#include <stddef.h>

/* The OpenAI error type for an HTTP status ("invalid_request_error", ...). */
const char *dp_error_type(int status);

/* A new NUL-terminated JSON body (caller frees), or NULL on allocation failure. */
char *dp_error_body(int status, const char *code, const char *message);

/* Writes "data: {"error":{...}}\n\n" into buf. Returns its length, or 0 if it does not fit. */
size_t dp_error_sse_event(char *buf, size_t cap, int status, const char *code, const char *message);

/* The Anthropic error type for an HTTP status ("not_found_error", ...). */
const char *dp_error_anthropic_type(int status);

/* dp_error_body, or Anthropic's shape when anthropic is true. */
char *dp_error_body_shaped(bool anthropic, int status, const char *code, const char *message);

/* dp_error_sse_event, or for anthropic "event: error\ndata: {...}\n\n". */
size_t dp_error_sse_event_shaped(bool anthropic, char *buf, size_t cap, int status,
                                 const char *code, const char *message);

#endif
