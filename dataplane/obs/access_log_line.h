/*
 * One access-log line (see access_log.h): a JSON object on one line, built
 * from the request and its journal with the escaping writer of
 * json_writer.h, so it is valid JSON whatever a client or the registry put
 * in a model name, a request id or a worker id. Every field is documented
 * in docs/operations.md, "Reading the access log".
 *
 * Threading: the request's loop thread.
 */
#ifndef SY_DATAPLANE_ACCESS_LOG_LINE_H
#define SY_DATAPLANE_ACCESS_LOG_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_ALOG_LINE_MAX (8u * 1024u) /* 16 attempts with the longest ids fit */

struct dp_request;
struct dp_journal;

/* The line of req (status sent; client_left as dp_journal_finish has it;
 * now_ms monotonic) with its '\n' into buf. Returns its length, or 0 when
 * it did not fit in cap. */
size_t dp_alog_format(const struct dp_request *req, const struct dp_journal *j, int status,
                      bool client_left, uint64_t now_ms, char *buf, size_t cap);

#endif
