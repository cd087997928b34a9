/*
 * The form fields routing needs from a multipart/form-data upload (the
 * audio routes: vLLM reads them with FastAPI's Form()): "model" and
 * "stream". libmicrohttpd's post processor is fed each upload chunk as it
 * arrives, beside the body buffer that keeps the bytes to forward; it
 * walks the parts and hands over field values, and the file's contents
 * pass through it without being kept, so the upload is held once, in the
 * request's body, and goes to the worker exactly as it came (boundary and
 * all: the client's Content-Type is forwarded).
 *
 * A body that is not multipart/form-data (or urlencoded, which MHD's
 * processor also reads and FastAPI's Form() accepts), or that the
 * processor gives up on, is malformed: dp_form_result says so once the
 * body is complete.
 *
 * Threading: the request's loop.
 */
#ifndef SY_DATAPLANE_HTTP_FORM_H
#define SY_DATAPLANE_HTTP_FORM_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "common/config.h"

struct dp_form;

/* A reader for conn's upload (its Content-Type decides), or NULL when
 * memory runs out. Never NULL for a wrong content type: that is a
 * malformed form, reported by dp_form_result. */
struct dp_form *dp_form_create(struct MHD_Connection *conn);

/* destroy(NULL) is a no-op. */
void dp_form_destroy(struct dp_form *f);

/* Feeds the next upload bytes. */
void dp_form_feed(struct dp_form *f, const char *data, size_t len);

/* What the whole body said: 0 with model (empty when the form has none)
 * and stream set, or -EINVAL (not a form, malformed, or a model too long
 * to be one: the caller's message is in why, NUL-terminated). */
int dp_form_result(struct dp_form *f, char model[CFG_MODEL_MAX], bool *stream, const char **why);

#endif
