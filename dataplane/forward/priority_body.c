/*
 * The tenant's band as vLLM's request priority (see priority_body.h).
 * Off by default: then every request costs one branch here.
 */
#include "dataplane/forward/priority_body.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>

#include "dataplane/admission/api_keys.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/routes.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/http/request.h"

int dp_priority_of_band(int band)
{
    switch (band) {
    case DP_PRIO_HIGH:
        return -1;
    case DP_PRIO_LOW:
        return 1;
    default:
        return 0;
    }
}

/* The shapes whose requests vLLM schedules by their priority field. */
static bool priority_body_takes_priority(enum dp_body shape)
{
    return shape == DP_BODY_CHAT || shape == DP_BODY_COMPLETION || shape == DP_BODY_GENERATE;
}

int dp_priority_body_apply(struct dp_request *req)
{
    /* Without a keys file nobody has a band: the client's own priority stays. */
    if (!req->loop->sh->cfg->admission.forward_priority || !req->loop->adm.keys_on ||
        !priority_body_takes_priority(dp_request_shape(req)))
        return 0;
    struct dp_skel_doc d;
    int rc = dp_skel_doc_open(&d, req->body.data, req->body.len);
    if (rc != 0)
        return rc == -EINVAL ? 0 : rc; /* not an object: the parser already answered that */
    json_t *p = json_integer(dp_priority_of_band(req->adm.prio));
    if (p == NULL || json_object_set_new(d.root, "priority", p) != 0) {
        dp_skel_doc_close(&d, NULL, NULL);
        return -ENOMEM;
    }
    char *body = NULL;
    size_t len = 0;
    rc = dp_skel_doc_close(&d, &body, &len);
    if (rc == 0) {
        rc = buf_adopt(&req->body, body, len);
        if (rc != 0)
            free(body);
    }
    return rc;
}
