/*
 * A cache_isolation tenant's cache_salt (see salt_body.h). The body is
 * rewritten only for such a tenant, so every other request costs one
 * branch here.
 */
#include "dataplane/forward/salt_body.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>

#include "common/token_chain.h"
#include "dataplane/admission/cache_salt.h"
#include "dataplane/core/loop.h"
#include "dataplane/core/routes.h"
#include "dataplane/http/json_skeleton.h"
#include "dataplane/http/request.h"

/* The shapes whose requests vLLM caches and accepts a cache_salt in. */
static bool salt_body_takes_salt(enum dp_body shape)
{
    return shape == DP_BODY_CHAT || shape == DP_BODY_COMPLETION || shape == DP_BODY_RESPONSES ||
           shape == DP_BODY_MESSAGES || shape == DP_BODY_GENERATE;
}

static void salt_body_route_by(struct dp_request *req, const char *salt)
{
    req->salted = true;
    req->salt_hash = tkc_salt_hash(salt, DP_SALT_HEX_LEN);
}

int dp_salt_body_apply(struct dp_request *req)
{
    if (!req->adm.cache_isolation)
        return 0;
    const struct dp_salt_key *k = req->loop->sh->salt_key;
    if (k == NULL)
        return -ENOKEY; /* the keys file check refuses this: never reached */
    char salt[DP_SALT_HEX_LEN + 1];
    if (!salt_body_takes_salt(dp_request_shape(req))) {
        dp_salt_derive(k, req->adm.tenant, NULL, 0, salt);
        salt_body_route_by(req, salt);
        return 0;
    }
    struct dp_skel_doc d;
    int rc = dp_skel_doc_open(&d, req->body.data, req->body.len);
    if (rc != 0)
        return rc;
    json_t *client = json_object_get(d.root, "cache_salt");
    json_t *own = NULL;
    if (client != NULL && !json_is_null(client)) {
        own = json_is_string(client) ? dp_skel_string(&d.skel, d.body, client) : NULL;
        if (own == NULL || json_string_length(own) == 0) {
            json_decref(own);
            dp_skel_doc_close(&d, NULL, NULL);
            return -EINVAL;
        }
    }
    dp_salt_derive(k, req->adm.tenant, own != NULL ? json_string_value(own) : NULL,
                   own != NULL ? json_string_length(own) : 0, salt);
    json_decref(own);
    char *body = NULL;
    size_t len = 0;
    if (json_object_set_new(d.root, "cache_salt", json_string(salt)) != 0) {
        dp_skel_doc_close(&d, NULL, NULL);
        return -ENOMEM;
    }
    rc = dp_skel_doc_close(&d, &body, &len);
    if (rc == 0) {
        rc = buf_adopt(&req->body, body, len);
        if (rc != 0)
            free(body);
    }
    if (rc == 0)
        salt_body_route_by(req, salt);
    return rc;
}
