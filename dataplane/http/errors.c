/*
 * OpenAI error bodies (see errors.h), built with jansson so any message is
 * escaped correctly.
 */
#include "dataplane/http/errors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dp_error_type(int status)
{
    switch (status) {
    case 400:
    case 404:
    case 405:
    case 413:
        return "invalid_request_error";
    case 401:
    case 403:
        return "authentication_error";
    case 429:
        return "rate_limit_error";
    case 503:
        return "service_unavailable";
    case 504:
        return "timeout";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static json_t *error_object(int status, const char *code, const char *message)
{
    json_t *obj = json_pack("{s:{s:s, s:s, s:s}}", "error", "message", message, "type",
                            dp_error_type(status), "code", code);
    if (obj != NULL || message == NULL)
        return obj;
    /* The message echoes bytes from a client or a worker that are not
     * UTF-8, which JSON cannot carry: say it with them replaced rather than
     * lose the whole error body. */
    char *clean = strdup(message);
    if (clean == NULL)
        return NULL;
    for (char *c = clean; *c != '\0'; c++)
        if ((unsigned char)*c >= 0x80 || (unsigned char)*c < 0x20)
            *c = '?';
    obj = json_pack("{s:{s:s, s:s, s:s}}", "error", "message", clean, "type", dp_error_type(status),
                    "code", code);
    free(clean);
    return obj;
}

char *dp_error_body(int status, const char *code, const char *message)
{
    json_t *obj = error_object(status, code, message);
    if (obj == NULL)
        return NULL;
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return text;
}

size_t dp_error_sse_event(char *buf, size_t cap, int status, const char *code, const char *message)
{
    char *body = dp_error_body(status, code, message);
    if (body == NULL)
        return 0;
    size_t len = strlen(body) + 8; /* "data: " + body + "\n\n" */
    size_t n = 0;
    if (len < cap) {
        memcpy(buf, "data: ", 6);
        memcpy(buf + 6, body, len - 8);
        memcpy(buf + len - 2, "\n\n", 2);
        n = len;
    }
    free(body);
    return n;
}

const char *dp_error_anthropic_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *dp_error_body_shaped(bool anthropic, int status, const char *code, const char *message)
{
    if (!anthropic)
        return dp_error_body(status, code, message);
    json_t *obj = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                            dp_error_anthropic_type(status), "message", message);
    if (obj == NULL)
        return NULL;
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return text;
}

size_t dp_error_sse_event_shaped(bool anthropic, char *buf, size_t cap, int status,
                                 const char *code, const char *message)
{
    if (!anthropic)
        return dp_error_sse_event(buf, cap, status, code, message);
    char *body = dp_error_body_shaped(true, status, code, message);
    if (body == NULL)
        return 0;
    int n = snprintf(buf, cap, "event: error\ndata: %s\n\n", body);
    free(body);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}
