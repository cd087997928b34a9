/*
 * The admin API's browser guard (see admin_guard.h). Host and Origin are
 * parsed with libcurl's URL API, as every URL here is: a Host header is
 * read as the authority of "http://<host>/", an Origin as a URL that must
 * have nothing after its authority.
 */
#include "controlplane/admin/admin_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

int adm_guard_init(struct adm_guard *g, const char *admin_listen,
                   const struct cfg_str_list *allowed_hosts)
{
    char host[CFG_ADDR_MAX];
    uint16_t port = 0;
    if (cfg_parse_host_port(admin_listen, host, sizeof(host), &port) != 0)
        return -EINVAL;
    g->port = port;
    memset(&g->allowed_hosts, 0, sizeof(g->allowed_hosts));
    if (allowed_hosts != NULL)
        g->allowed_hosts = *allowed_hosts;
    return 0;
}

/* An IP literal cannot be rebound: only a DNS name can change its address. */
static bool guard_is_ip_literal(const char *h)
{
    unsigned char addr[16];
    size_t n = strlen(h);
    if (n > 2 && h[0] == '[' && h[n - 1] == ']') {
        char inner[64];
        if (n - 2 >= sizeof(inner))
            return false;
        memcpy(inner, h + 1, n - 2);
        inner[n - 2] = '\0';
        char *zone = strchr(inner, '%'); /* fe80::1%eth0 */
        if (zone != NULL)
            *zone = '\0';
        return inet_pton(AF_INET6, inner, addr) == 1;
    }
    return inet_pton(AF_INET, h, addr) == 1;
}

static bool guard_name_is_ours(const struct adm_guard *g, const char *h)
{
    if (guard_is_ip_literal(h) || strcasecmp(h, "localhost") == 0)
        return true;
    for (size_t i = 0; i < g->allowed_hosts.n; i++)
        if (strcasecmp(h, g->allowed_hosts.item[i]) == 0)
            return true;
    return false;
}

/* The host, port and scheme of url, which must be nothing but an authority
 * (no user, no path but "/", no query). 0 or -EINVAL. */
static int guard_authority(const char *url, char *host, size_t host_len, long *port, char *scheme,
                           size_t scheme_len)
{
    CURLU *u = curl_url();
    if (u == NULL)
        return -ENOMEM;
    int rc = -EINVAL;
    char *h = NULL, *p = NULL, *s = NULL, *path = NULL, *user = NULL, *query = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &s, 0) != CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
        curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK && strcmp(path, "/") != 0)
        goto out;
    if (strlen(h) >= host_len || strlen(s) >= scheme_len)
        goto out;
    strcpy(host, h);
    strcpy(scheme, s);
    *port = strtol(p, NULL, 10);
    rc = 0;
out:
    curl_free(h);
    curl_free(p);
    curl_free(s);
    curl_free(path);
    curl_free(user);
    curl_free(query);
    curl_url_cleanup(u);
    return rc;
}

bool adm_guard_host_is_ours(const struct adm_guard *g, const char *host)
{
    if (host == NULL || host[0] == '\0' || strlen(host) > 255 || strpbrk(host, "/?#@\\ ") != NULL)
        return false;
    char url[300], name[256], scheme[16];
    long port;
    snprintf(url, sizeof(url), "http://%s/", host);
    if (guard_authority(url, name, sizeof(name), &port, scheme, sizeof(scheme)) != 0)
        return false;
    return guard_name_is_ours(g, name);
}

static bool guard_origin_is_ours(const struct adm_guard *g, const char *origin)
{
    char name[256], scheme[16];
    long port;
    if (strcmp(origin, "null") == 0 || strlen(origin) > 300)
        return false;
    if (guard_authority(origin, name, sizeof(name), &port, scheme, sizeof(scheme)) != 0)
        return false;
    if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)
        return false;
    return port == g->port && guard_name_is_ours(g, name);
}

/* application/json, with parameters (charset=utf-8) or not. */
static bool guard_is_json(const char *content_type)
{
    static const char want[] = "application/json";
    if (content_type == NULL || strncasecmp(content_type, want, sizeof(want) - 1) != 0)
        return false;
    char next = content_type[sizeof(want) - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

static bool guard_changes_state(const char *method)
{
    return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
           strcmp(method, "PATCH") == 0;
}

unsigned adm_guard_check(const struct adm_guard *g, const struct adm_guard_request *r, char *why,
                         size_t why_len)
{
    /* HTTP/1.0 clients may send no Host; every browser sends one. */
    if (r->host != NULL && !adm_guard_host_is_ours(g, r->host)) {
        snprintf(why, why_len,
                 "Host '%.100s' does not name this admin API: use its address, localhost, or a "
                 "name listed in controlplane.admin_allowed_hosts",
                 r->host);
        return 403;
    }
    if (r->origin != NULL && !guard_origin_is_ours(g, r->origin)) {
        snprintf(why, why_len,
                 "requests from the web origin '%.100s' are refused: the admin API serves only "
                 "its own pages and non-browser clients",
                 r->origin);
        return 403;
    }
    if (r->sec_fetch_site != NULL && strcasecmp(r->sec_fetch_site, "cross-site") == 0) {
        snprintf(why, why_len, "cross-site requests from a browser are refused");
        return 403;
    }
    if (guard_changes_state(r->method) && !guard_is_json(r->content_type)) {
        snprintf(why, why_len, "%s needs Content-Type: application/json (got %.60s)", r->method,
                 r->content_type != NULL ? r->content_type : "none");
        return 415;
    }
    return 0;
}
