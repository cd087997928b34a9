/*
 * admission.forward_priority: a tenant's priority band (the keys file's
 * `priority`) forwarded as vLLM's request `priority` (an int, lower runs
 * first; workers need --scheduling-policy priority, else vLLM refuses any
 * value but 0): high -1, normal 0, low 1, written into the body of chat,
 * completions and /inference/v1/generate requests (and /invocations
 * bodies of the first two shapes), the requests vLLM schedules by it.
 *
 * The router's band wins: for a tenant of the keys file the client's own
 * `priority` is replaced, since a client must not lift itself above the
 * band its operator gave it (a normal tenant's "priority": -5 would
 * overtake every high tenant on the worker). Without a keys file
 * (anonymous requests, no band) the body is forwarded as it came. The
 * rewrite is salt_body.h's (json_skeleton.h's dp_skel_doc), done once
 * before a plan is chosen, so both P/D legs and every retry carry it.
 *
 * Threading: the request's loop.
 */
#ifndef SY_DATAPLANE_FORWARD_PRIORITY_BODY_H
#define SY_DATAPLANE_FORWARD_PRIORITY_BODY_H

struct dp_request;

/* The priority a band is forwarded as. */
int dp_priority_of_band(int band);

/*
 * After admission and parsing. Returns 0 (nothing to do, or req->body
 * replaced), -E2BIG when the rewritten body would exceed dataplane.max_body
 * (413), -ENOMEM.
 */
int dp_priority_body_apply(struct dp_request *req);

#endif
