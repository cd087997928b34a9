/*
 * Form fields of a multipart upload (see form.h). Field values may come
 * in several pieces (off > 0); only model's and stream's are kept, each
 * bounded, so a form of any size costs the processor's buffer and these.
 */
#include "dataplane/http/form.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DP_FORM_BUFFER 4096u /* the post processor's buffer (its minimum is 256) */

struct dp_form {
    struct MHD_PostProcessor *pp; /* NULL: not a form MHD can read */
    char model[CFG_MODEL_MAX];
    size_t model_len;
    char stream[8]; /* "true"/"false" and a little: longer is not a boolean */
    size_t stream_len;
    bool model_too_long;
    bool stream_too_long;
    bool failed; /* the processor gave up on the body */
};

/* Appends a piece of a field's value, bounded by cap (with its NUL). */
static bool form_keep(char *dst, size_t *len, size_t cap, const char *data, size_t size)
{
    if (*len + size >= cap)
        return false;
    memcpy(dst + *len, data, size);
    *len += size;
    dst[*len] = '\0';
    return true;
}

static enum MHD_Result form_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *filename, const char *content_type,
                                  const char *transfer_encoding, const char *data, uint64_t off,
                                  size_t size)
{
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;
    (void)off;
    struct dp_form *f = cls;
    /* A file part named "model" is not the model field (vLLM's Form()
     * would refuse it as a string); file contents are not kept. */
    if (key == NULL || filename != NULL || size == 0)
        return MHD_YES;
    if (strcmp(key, "model") == 0 &&
        !form_keep(f->model, &f->model_len, sizeof(f->model), data, size))
        f->model_too_long = true;
    else if (strcmp(key, "stream") == 0 &&
             !form_keep(f->stream, &f->stream_len, sizeof(f->stream), data, size))
        f->stream_too_long = true;
    return MHD_YES;
}

struct dp_form *dp_form_create(struct MHD_Connection *conn)
{
    struct dp_form *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    f->pp = conn != NULL ? MHD_create_post_processor(conn, DP_FORM_BUFFER, form_field, f) : NULL;
    return f;
}

void dp_form_destroy(struct dp_form *f)
{
    if (f == NULL)
        return;
    if (f->pp != NULL)
        (void)MHD_destroy_post_processor(f->pp);
    free(f);
}

void dp_form_feed(struct dp_form *f, const char *data, size_t len)
{
    if (f->pp == NULL || f->failed || len == 0)
        return;
    if (MHD_post_process(f->pp, data, len) != MHD_YES)
        f->failed = true;
}

int dp_form_result(struct dp_form *f, char model[CFG_MODEL_MAX], bool *stream, const char **why)
{
    model[0] = '\0';
    *stream = false;
    if (f == NULL || f->pp == NULL) {
        *why = "the request body is not multipart/form-data";
        return -EINVAL;
    }
    /* The processor reports a body cut inside a part only when destroyed. */
    bool complete = MHD_destroy_post_processor(f->pp) == MHD_YES;
    f->pp = NULL;
    if (f->failed || !complete) {
        *why = "the multipart/form-data body is malformed";
        return -EINVAL;
    }
    if (f->model_too_long || strlen(f->model) != f->model_len) {
        *why = "the form field 'model' is too long or holds a NUL";
        return -EINVAL;
    }
    /* FastAPI reads a form boolean as pydantic does: true/false, 1/0,
     * yes/no, on/off; anything else is vLLM's to refuse. */
    static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
    for (size_t i = 0; !f->stream_too_long && i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcasecmp(f->stream, yes[i]) == 0)
            *stream = true;
    memcpy(model, f->model, f->model_len + 1);
    return 0;
}
