/*
 * Fuzz target: a client's request body, as the data plane reads it. Every
 * body parser of a proxied route (model, stream, user and the routing text
 * of each body shape) runs on the same bytes, and so does the JSON
 * skeleton that sets long strings aside from jansson.
 *
 * Oracle beyond the sanitizers: an error body can always be made of the
 * bytes (they may be echoed in it); a body jansson accepts must leave a
 * skeleton jansson accepts too (the skeleton only shortens strings), and
 * splicing an unmodified skeleton's dump back must give a body jansson
 * accepts. A failed oracle aborts, which libFuzzer reports as a crash.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "dataplane/http/errors.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/http/request.h"
#include "dataplane/core/routes.h"
#include "dataplane/types/request_types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The parser depends on the route only through its row's body shape
 * (routes.h): one route of each shape that reads a body covers every
 * route's parsing, and costs a third of parsing on all of them. Found once
 * (LLVMFuzzerInitialize); the request and its buffers are reused, reset
 * per parse (dp_request_parse shrinks the body to fit, so a read past
 * its end is still caught). */
#define FUZZ_BODY_MAX (64u << 20) /* past any input libFuzzer makes */

static enum dp_route fuzz_routes[DP_BODY_COUNT];
static size_t fuzz_n_routes;
static struct dp_request fuzz_req;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bool seen[DP_BODY_COUNT] = {false};
    for (int route = DP_ROUTE_UNSET + 1; route < DP_ROUTE_COUNT; route++) {
        enum dp_body shape = dp_route_row((enum dp_route)route)->body;
        if (shape <= DP_BODY_NONE || shape == DP_BODY_ID || shape >= DP_BODY_COUNT || seen[shape])
            continue;
        seen[shape] = true;
        fuzz_routes[fuzz_n_routes++] = (enum dp_route)route;
    }
    buf_init(&fuzz_req.body, FUZZ_BODY_MAX);
    buf_init(&fuzz_req.routing_text, DP_ROUTING_TEXT_MAX);
    return 0;
}

/* The body is appended once and read by every route's parse: parsing
 * never writes to it, and the first parse shrinks it to fit, so every
 * parse reads a buffer that ends where the body does. */
static void parse_on_every_route(const uint8_t *data, size_t size)
{
    buf_reset(&fuzz_req.body);
    if (buf_append(&fuzz_req.body, (const char *)data, size) != 0)
        abort();
    for (size_t i = 0; i < fuzz_n_routes; i++) {
        struct buf body = fuzz_req.body, text = fuzz_req.routing_text;
        memset(&fuzz_req, 0, sizeof(fuzz_req));
        fuzz_req.route = fuzz_routes[i];
        fuzz_req.body = body;
        fuzz_req.routing_text = text;
        buf_reset(&fuzz_req.routing_text);
        (void)dp_request_parse(&fuzz_req);
    }
    if (fuzz_req.body.len != size || memcmp(fuzz_req.body.data, data, size) != 0)
        abort(); /* a parse wrote into the body the routes share */
}

static void skeleton_round_trip(const uint8_t *data, size_t size)
{
    struct dp_skel s;
    /* A small threshold so short fuzz inputs exercise the markers too. */
    if (dp_skel_build(&s, (const char *)data, size, 8, 0x5eedf00dull) != 0)
        return;
    json_error_t e;
    json_t *orig = json_loadb((const char *)data, size, 0, &e);
    json_t *skel = json_loadb(s.text, s.len, 0, &e);
    if (orig != NULL && skel == NULL)
        abort(); /* the skeleton broke a valid body */
    if (skel != NULL) {
        char *dumped = json_dumps(skel, JSON_COMPACT | JSON_ENCODE_ANY);
        if (dumped != NULL) {
            size_t out_len = 0;
            char *back = dp_skel_splice(&s, (const char *)data, dumped, strlen(dumped), &out_len);
            if (back != NULL && orig != NULL) {
                json_t *again = json_loadb(back, out_len, 0, &e);
                if (again == NULL)
                    abort(); /* splicing a valid body's skeleton broke it */
                json_decref(again);
            }
            free(back);
            free(dumped);
        }
    }
    json_decref(orig);
    json_decref(skel);
    dp_skel_fini(&s);
}

/* Error bodies echo client bytes (a model name, a path): whatever they
 * are, the client must get a body. The message is the body up to its
 * first NUL (the body buffer is NUL-terminated). */
static void error_body_of(void)
{
    char *body = dp_error_body(400, "invalid_request", fuzz_req.body.data);
    if (body == NULL)
        abort();
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse_on_every_route(data, size);
    error_body_of();
    skeleton_round_trip(data, size);
    return 0;
}
