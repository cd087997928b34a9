/*
 * The admin REST server on controlplane.admin_listen: libmicrohttpd in
 * external epoll mode (no thread of its own). Its epoll descriptor joins the
 * control plane's loop, so every route runs on the loop thread and reads and
 * writes the registry as its single writer: no locks, and a slow probe can
 * never race an admin write. Routes are short; the one that must wait
 * (reset_load, for the dataplanes' answers) suspends its connection and is
 * finished later through the struct adm_reply_later the server hands it.
 *
 * Every request is authenticated first when controlplane.admin_token_file is
 * set (Authorization: Bearer <token>, compared in constant time, else 401).
 * Bodies over ADM_HTTP_BODY_MAX are refused with 413. Routing and answers
 * are in admin_routes.c; per-route request counts feed /metrics through the
 * hook adm_http_create registers in the adm_ctx (adm_ctx.http_metrics).
 */
#ifndef SY_CONTROLPLANE_ADMIN_HTTP_H
#define SY_CONTROLPLANE_ADMIN_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "controlplane/admin/admin_ctx.h"

#define ADM_HTTP_BODY_MAX (64u * 1024u)

/* Starts listening and registers the request counters in ctx->http_metrics.
 * ctx is borrowed. 0 or a negative errno (logged). */
int adm_http_create(struct adm_ctx *ctx, struct adm_http **out);
void adm_http_destroy(struct adm_http *h);

int adm_http_fd(const struct adm_http *h);
int adm_http_timeout_ms(const struct adm_http *h);
void adm_http_run(struct adm_http *h);

#endif
