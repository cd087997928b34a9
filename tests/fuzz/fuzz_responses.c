/*
 * Fuzz target: the Responses API pieces that read outside bytes outside
 * the request body (the bodies themselves, `instructions`/`input` and
 * Messages' `system`/`messages`, are the `request` target's: it runs every
 * route's parser). Fed here:
 *  - a worker's answer to POST /v1/responses, to the id reader that makes
 *    response stickiness work (the top-level "id" of a JSON answer, or
 *    response.id of an SSE stream's response.created event), cut into
 *    reads of a size the input picks;
 *  - the answer's first line as a request path, to the route matcher that
 *    takes the id segment of GET /v1/responses/{id} and its cancel.
 * Input: byte 0 picks the read size (0 = all at once), byte 1 whether the
 * answer is a stream, the rest is the answer.
 *
 * Oracle beyond the sanitizers: the id found, and whether one is found,
 * do not depend on how the answer was cut; an id read from a JSON answer
 * that jansson accepts (no duplicate keys) is that object's "id"; a path's
 * id lies inside the path, on a route that has one.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/forward/resp_affinity.h"
#include "dataplane/core/routes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads the answer in reads of chunk bytes (0 = one read); returns the
 * capture, with the id if one was found. */
static struct dp_resp_capture *capture(const char *s, size_t len, size_t chunk, bool sse)
{
    struct dp_resp_capture *c = dp_resp_capture_new(sse);
    if (c == NULL)
        abort();
    size_t step = chunk == 0 ? (len ? len : 1) : chunk;
    for (size_t off = 0; off < len; off += step)
        (void)dp_resp_capture_feed(c, s + off, len - off < step ? len - off : step);
    return c;
}

static void check_json_id(const char *s, size_t len, const char *id, size_t id_len)
{
    json_error_t e;
    json_t *root = json_loadb(s, len, JSON_REJECT_DUPLICATES, &e);
    if (root == NULL)
        return; /* not JSON: the reader's guess is all there is */
    const json_t *want = json_object_get(root, "id");
    if (!json_is_string(want) || json_string_length(want) != id_len ||
        memcmp(json_string_value(want), id, id_len) != 0)
        abort(); /* the reader took another string than the answer's id */
    json_decref(root);
}

static void check_path(const char *s, size_t len)
{
    const char *nl = memchr(s, '\n', len);
    char *path = strndup(s, nl != NULL ? (size_t)(nl - s) : len); /* a URL stops at a NUL */
    if (path == NULL)
        return;
    const char *id;
    size_t id_len;
    enum dp_route r = dp_route_match(path, &id, &id_len);
    size_t pl = strlen(path);
    if (id != NULL) {
        if (id < path || id + id_len > path + pl || dp_route_row(r)->id_suffix == NULL)
            abort();
    } else if (id_len != 0) {
        abort();
    }
    if (dp_route_find(path) != r)
        abort();
    free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t chunk = data[0] % 64;
    bool sse = (data[1] & 1) != 0;
    const char *s = (const char *)data + 2;
    size_t len = size - 2;

    struct dp_resp_capture *whole = capture(s, len, 0, sse);
    struct dp_resp_capture *cut = capture(s, len, chunk, sse);
    size_t wl, cl;
    const char *wid = dp_resp_capture_id(whole, &wl);
    const char *cid = dp_resp_capture_id(cut, &cl);
    if ((wid == NULL) != (cid == NULL) || wl != cl || (wid != NULL && memcmp(wid, cid, wl) != 0))
        abort(); /* stickiness would depend on where a read ended */
    if (wid != NULL && !sse)
        check_json_id(s, len, wid, wl);
    dp_resp_capture_free(whole);
    dp_resp_capture_free(cut);

    check_path(s, len);
    return 0;
}
