/*
 * The cache_salt a request of a cache_isolation tenant is forwarded with
 * (admission/cache_salt.h says how it is derived and why): set in the body
 * of chat, completions, Responses and Messages requests, the routes whose
 * prompts a worker caches, replacing the client's own cache_salt by the
 * derivation that combines both. Routing then keys the request's prefixes
 * with that salt too (dp_request.salted), so the router's indexes, like
 * the worker's cache, match it only against the same tenant's prompts.
 * On other routes with a prompt (embeddings) the body is left as it is and
 * only routing is salted, by the tenant's bare salt.
 *
 * A request of any other tenant is not touched: its routing salt, if any,
 * is its body's own cache_salt (dp_request_parse), and its body is
 * forwarded as it came. The rewrite is the P/D legs' (json_skeleton.h's
 * dp_skel_doc), done once when forwarding begins, before a plan is
 * chosen: both P/D legs and every retry start from the rewritten body.
 *
 * Threading: the request's loop.
 */
#ifndef SY_DATAPLANE_FORWARD_SALT_BODY_H
#define SY_DATAPLANE_FORWARD_SALT_BODY_H

struct dp_request;

/*
 * After admission (the tenant is known) and parsing. Returns 0 (nothing
 * to do, or done: req->body and the routing salt replaced); -EINVAL when
 * the client's cache_salt is present but not a non-empty string (vLLM's
 * own rule: answer 400); -E2BIG when the rewritten body would exceed
 * dataplane.max_body (413); -ENOKEY without the router's secret; -ENOMEM.
 */
int dp_salt_body_apply(struct dp_request *req);

#endif
