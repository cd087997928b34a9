/*
 * A request body's JSON with its long strings set aside, so that jansson
 * parses only the small structure around them. jansson decodes strings one
 * character at a time (measured here: 11 ms of CPU for a 400 KB chat
 * body, against a budget of 1 ms); the dataplane needs the model, the
 * stream flag, the user and the prompt text, never the decoded contents of
 * a long string.
 *
 * dp_skel_build copies the body, replacing every string whose raw (still
 * escaped) contents are at least `min_string` bytes with a short marker
 * string carrying a per-request nonce and an index. dp_skel_span tells
 * whether a string that jansson decoded from the skeleton is such a marker
 * and where the original raw contents are. dp_skel_splice turns a JSON
 * text dumped from a modified skeleton back into a full body by putting
 * the original raw contents where the markers are (the P/D leg rewrite).
 *
 * The raw contents are the string as the client escaped it: fine as a
 * routing key (the same text arrives the same way), not a decoded value.
 * Whether the text is valid JSON is still jansson's call on the skeleton;
 * invalid escapes inside a long string are left to the worker to refuse.
 *
 * Caller storage; one thread; dp_skel_fini frees.
 */
#ifndef SY_DATAPLANE_JSON_SKELETON_H
#define SY_DATAPLANE_JSON_SKELETON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Strings at least this long (raw bytes) are set aside by the dataplane. */
#define DP_SKEL_MIN_STRING 256u

struct dp_skel_span {
    size_t off; /* in the original body: first byte after the opening quote */
    size_t len; /* raw contents, up to the closing quote */
};

struct dp_skel {
    char *text; /* the skeleton JSON, NUL-terminated; owned */
    size_t len;
    struct dp_skel_span *spans; /* owned */
    size_t n_spans;
    uint64_t nonce;
};

/* Builds the skeleton of body[0..len). 0 or -ENOMEM. */
int dp_skel_build(struct dp_skel *s, const char *body, size_t len, size_t min_string,
                  uint64_t nonce);

/* When str (a string decoded from the skeleton) is a marker, its span. */
const struct dp_skel_span *dp_skel_span(const struct dp_skel *s, const char *str, size_t len);

/*
 * dumped: JSON text produced by json_dumps of (a modification of) the
 * parsed skeleton, with jansson's default escaping. Returns a malloc'ed
 * body with every marker replaced by its original raw contents (and
 * *out_len), or NULL on allocation failure.
 */
char *dp_skel_splice(const struct dp_skel *s, const char *body, const char *dumped,
                     size_t dumped_len, size_t *out_len);

void dp_skel_fini(struct dp_skel *s);

/* The decoded value of a string jansson read from s's text: str itself (a
 * new reference) when it is not a marker, else the marker's original raw
 * contents decoded into a new string. NULL when they are not a valid JSON
 * string, or without memory. For the rare field whose value the router
 * needs and which may be long (a cache_salt). */
json_t *dp_skel_string(const struct dp_skel *s, const char *body, json_t *str);

/*
 * A body opened for editing (the one way the data plane rewrites a
 * forwarded JSON body: the P/D legs, a tenant's cache_salt): its skeleton
 * parsed into root, to be changed with jansson and closed into a new body
 * with the long strings put back. Keys keep their order and values their
 * meaning; only the spelling of numbers, short strings and white space may
 * differ from the client's bytes.
 */
struct dp_skel_doc {
    const char *body; /* borrowed, until closed */
    struct dp_skel skel;
    json_t *root; /* owned: a JSON object */
};

/* 0; -ENOMEM; -EINVAL when body is not a JSON object (d is then empty). */
int dp_skel_doc_open(struct dp_skel_doc *d, const char *body, size_t len);

/* Dumps root with the long strings put back into *out (malloc'd, and
 * *out_len), or only frees when out is NULL; d is freed either way.
 * 0 or -ENOMEM. */
int dp_skel_doc_close(struct dp_skel_doc *d, char **out, size_t *out_len);

#endif
