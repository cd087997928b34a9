/*
 * The decode leg's relay filter (legs.h's filter and filter_commit) on a
 * request's P/D state: with sse and a known prefill usage, the lines of a
 * stream whose chunk carries a usage object are rewritten by
 * dp_pd_merge_line (pd_body.h), so the client sees the prefill's prompt
 * and cached tokens. Lines are rewritten whole: a partial last line is
 * held back (at most 16 KiB; a longer one, never a usage chunk of vLLM's,
 * ends the rewriting) until the chunk that ends it.
 *
 * The relay may refuse a chunk (the client is behind) and curl offers it
 * again, so filtering and holding are two steps: dp_pd_filter sets *out
 * (data itself, or pd's output buffer) without changing what is held;
 * dp_pd_filter_commit, once the relay took *out, does.
 *
 * Ownership: the buffers (common/buf.h, capped) live in struct
 * dp_pd_state (request_types.h), owned by the request;
 * dp_pd_filter_init readies them, dp_pd_filter_fini frees them. Threading: the
 * request's loop.
 */
#ifndef SY_DATAPLANE_PD_USAGE_FILTER_H
#define SY_DATAPLANE_PD_USAGE_FILTER_H

#include <stdbool.h>
#include <stddef.h>

struct dp_pd_state;

/* Readies pd's filter state (empty buffers with their caps); allocates nothing. */
void dp_pd_filter_init(struct dp_pd_state *pd);

void dp_pd_filter(struct dp_pd_state *pd, bool sse, const char *data, size_t len, const char **out,
                  size_t *out_len);
void dp_pd_filter_commit(struct dp_pd_state *pd, bool sse, const char *data, size_t len);

/* Frees the filter's buffers; pd's filter state is empty again. */
void dp_pd_filter_fini(struct dp_pd_state *pd);

#endif
