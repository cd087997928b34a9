/*
 * The config's scalar syntax: what a duration, a size, a boolean, an enum
 * name, a HOST:PORT, a worker URL or id, a shm name or a path may look like,
 * and how a range bound is spelled back in a message. Every function here is
 * a pure function of its text (curl_url aside, which allocates): no YAML, no
 * struct cfg, no globals written, so any thread may call them at any time.
 * The walker (config_yaml.c) turns a -EINVAL from here into a positioned
 * message; the daemons and the admin API call the public ones (config.h) to
 * apply the same rules to values that do not come from a file.
 */
#include "common/config_internal.h"

#include <ctype.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_SHM_NAME_LIMIT    250
#define CFG_SOCKET_PATH_LIMIT 107 /* sun_path holds 108 bytes with the NUL */
#define CFG_HOST_LIMIT        253

/* ---- names of enum values ---------------------------------------------- */

const struct cfg_enum_name cfg_role_names[] = {
    {"regular", CFG_ROLE_REGULAR},
    {"prefill", CFG_ROLE_PREFILL},
    {"decode", CFG_ROLE_DECODE},
    {NULL, 0},
};

const struct cfg_enum_name cfg_policy_names[] = {
    {"round_robin", CFG_POLICY_ROUND_ROBIN},
    {"random", CFG_POLICY_RANDOM},
    {"power_of_two", CFG_POLICY_POWER_OF_TWO},
    {"least_load", CFG_POLICY_LEAST_LOAD},
    {"consistent_hash", CFG_POLICY_CONSISTENT_HASH},
    {"cache_aware", CFG_POLICY_CACHE_AWARE},
    {"precise_cache_aware", CFG_POLICY_PRECISE_CACHE_AWARE},
    {NULL, 0},
};

const struct cfg_enum_name cfg_gate_names[] = {
    {"per_request", CFG_BALANCE_GATE_PER_REQUEST},
    {"fleet", CFG_BALANCE_GATE_FLEET},
    {NULL, 0},
};

const struct cfg_enum_name cfg_pd_fallback_names[] = {
    {"local_prefill", CFG_PD_FALLBACK_LOCAL_PREFILL},
    {"error", CFG_PD_FALLBACK_ERROR},
    {NULL, 0},
};

const struct cfg_enum_name cfg_load_signal_names[] = {
    {"combined", CFG_LOAD_SIGNAL_COMBINED},
    {"own", CFG_LOAD_SIGNAL_OWN},
    {NULL, 0},
};

static const char *enum_to_name(const struct cfg_enum_name *names, int value)
{
    for (const struct cfg_enum_name *n = names; n->name != NULL; n++) {
        if (n->value == value)
            return n->name;
    }
    return "unset";
}

int cfg_enum_parse(const struct cfg_enum_name *names, const char *text, int *out)
{
    if (text == NULL)
        return -EINVAL;
    for (const struct cfg_enum_name *n = names; n->name != NULL; n++) {
        if (strcmp(n->name, text) == 0) {
            *out = n->value;
            return 0;
        }
    }
    return -EINVAL;
}

void cfg_enum_list(const struct cfg_enum_name *names, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const struct cfg_enum_name *n = names; n->name != NULL && used < len; n++) {
        int w = snprintf(buf + used, len - used, "%s%s", n == names ? "" : "|", n->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

const char *cfg_role_name(enum cfg_role role)
{
    return enum_to_name(cfg_role_names, (int)role);
}

int cfg_role_parse(const char *text, enum cfg_role *out)
{
    int value = 0;
    int rc = cfg_enum_parse(cfg_role_names, text, &value);

    if (rc == 0)
        *out = (enum cfg_role)value;
    return rc;
}

const char *cfg_policy_name_str(enum cfg_policy_name name)
{
    return enum_to_name(cfg_policy_names, (int)name);
}

int cfg_policy_name_parse(const char *text, enum cfg_policy_name *out)
{
    int value = 0;
    int rc = cfg_enum_parse(cfg_policy_names, text, &value);

    if (rc == 0)
        *out = (enum cfg_policy_name)value;
    return rc;
}

/* ---- numbers, durations, sizes, booleans ----------------------------------- */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alnum(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Reads one or more decimal digits at s; *rest gets what follows them.
 * -EINVAL when there is no digit or the value overflows 64 bits. */
static int parse_digits(const char *s, uint64_t *out, const char **rest)
{
    uint64_t v = 0;
    const char *c = s;

    if (!is_digit(*c))
        return -EINVAL;
    while (is_digit(*c)) {
        uint64_t d = (uint64_t)(*c - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
        c++;
    }
    *out = v;
    *rest = c;
    return 0;
}

int cfg_parse_uint(const char *text, uint64_t *out)
{
    uint64_t v;
    const char *rest;

    if (text == NULL || parse_digits(text, &v, &rest) != 0 || *rest != '\0')
        return -EINVAL;
    *out = v;
    return 0;
}

struct unit {
    const char *name;
    uint64_t factor;
};

static const struct unit duration_units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {NULL, 0},
};

/* The unit-less row makes plain byte counts legal. */
static const struct unit size_units[] = {
    {"", 1},
    {"KiB", UINT64_C(1) << 10},
    {"MiB", UINT64_C(1) << 20},
    {"GiB", UINT64_C(1) << 30},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {NULL, 0},
};

/* DIGITS UNIT with UNIT from units; a bare "0" also when bare_zero. */
static int parse_with_unit(const char *text, const struct unit *units, bool bare_zero,
                           uint64_t *out)
{
    uint64_t v;
    const char *rest;

    if (text == NULL || out == NULL || parse_digits(text, &v, &rest) != 0)
        return -EINVAL;
    if (*rest == '\0' && bare_zero && v == 0) {
        *out = 0;
        return 0;
    }
    for (const struct unit *u = units; u->name != NULL; u++) {
        if (strcmp(u->name, rest) != 0)
            continue;
        if (v > UINT64_MAX / u->factor)
            return -EINVAL;
        *out = v * u->factor;
        return 0;
    }
    return -EINVAL;
}

int cfg_parse_duration_ms(const char *text, uint64_t *out_ms)
{
    return parse_with_unit(text, duration_units, true, out_ms);
}

int cfg_parse_size(const char *text, uint64_t *out_bytes)
{
    return parse_with_unit(text, size_units, false, out_bytes);
}

/* The shortest spelling of v in the largest unit that divides it. */
static void format_with_unit(uint64_t v, const struct unit *units, char *buf, size_t len)
{
    const struct unit *best = NULL;

    for (const struct unit *u = units; u->name != NULL; u++) {
        if (v % u->factor == 0 && (best == NULL || u->factor > best->factor))
            best = u;
    }
    if (v == 0 || best == NULL)
        snprintf(buf, len, "%" PRIu64, v);
    else
        snprintf(buf, len, "%" PRIu64 "%s", v / best->factor, best->name);
}

void cfg_format_duration(uint64_t ms, char *buf, size_t len)
{
    format_with_unit(ms, duration_units, buf, len);
}

void cfg_format_size(uint64_t bytes, char *buf, size_t len)
{
    format_with_unit(bytes, size_units, buf, len);
}

int cfg_parse_number(const char *text, double *out)
{
    char *end;
    double d;

    if (text == NULL || text[0] == '\0')
        return -EINVAL;
    for (const char *c = text; *c != '\0'; c++) {
        if (!is_digit(*c) && strchr(".eE+-", *c) == NULL)
            return -EINVAL;
    }
    errno = 0;
    d = strtod(text, &end);
    if (*end != '\0' || errno != 0 || !isfinite(d))
        return -EINVAL;
    *out = d;
    return 0;
}

int cfg_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"true", "True", "TRUE"};
    static const char *const no[] = {"false", "False", "FALSE"};

    if (text == NULL)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

/* ---- addresses, ids, names, paths ------------------------------------------ */

/* A host name or dotted-quad IPv4 address, not bracketed. */
static bool host_is_valid(const char *h, size_t n)
{
    bool dotted_digits = true;
    char tmp[CFG_HOST_LIMIT + 1];
    struct in_addr a4;

    if (n == 0 || n > CFG_HOST_LIMIT)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!is_alnum(c) && c != '-' && c != '.' && c != '_')
            return false;
        if (!is_digit(c) && c != '.')
            dotted_digits = false;
    }
    if (!dotted_digits)
        return true;
    memcpy(tmp, h, n);
    tmp[n] = '\0';
    return inet_pton(AF_INET, tmp, &a4) == 1;
}

int cfg_parse_host_port(const char *text, char *host, size_t host_len, uint16_t *port)
{
    const char *h;
    const char *colon;
    const char *rest;
    size_t n;
    uint64_t v;

    if (text == NULL || host == NULL || port == NULL)
        return -EINVAL;
    if (text[0] == '[') {
        char tmp[CFG_HOST_LIMIT + 1];
        struct in6_addr a6;
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return -EINVAL;
        h = text + 1;
        n = (size_t)(close - h);
        colon = close + 1;
        if (n == 0 || n > CFG_HOST_LIMIT)
            return -EINVAL;
        memcpy(tmp, h, n);
        tmp[n] = '\0';
        if (inet_pton(AF_INET6, tmp, &a6) != 1)
            return -EINVAL;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL)
            return -EINVAL;
        h = text;
        n = (size_t)(colon - text);
        if (!host_is_valid(h, n))
            return -EINVAL;
    }
    if (parse_digits(colon + 1, &v, &rest) != 0 || *rest != '\0' || v < 1 || v > 65535)
        return -EINVAL;
    if (n >= host_len)
        return -ENOSPC;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)v;
    return 0;
}

bool cfg_worker_id_is_valid(const char *id)
{
    size_t n;

    if (id == NULL)
        return false;
    n = strlen(id);
    if (n == 0 || n >= CFG_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!is_alnum(c) && c != '.' && c != '_' && c != ':' && c != '-')
            return false;
    }
    return true;
}

bool cfg_kv_endpoint_is_valid(const char *endpoint)
{
    if (endpoint[0] == '\0')
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (colon == NULL || colon[1] == '\0')
        return false;
    size_t host_len = (size_t)(colon - h);
    if (host_len > 0 && h[0] == '[') {
        if (host_len < 3 || h[host_len - 1] != ']')
            return false;
        for (size_t i = 1; i + 1 < host_len; i++)
            if (!is_alnum(h[i]) && h[i] != ':' && h[i] != '.')
                return false;
    } else if (!(host_len == 1 && h[0] == '*')) {
        for (size_t i = 0; i < host_len; i++)
            if (!is_alnum(h[i]) && h[i] != '.' && h[i] != '-')
                return false;
    }
    unsigned long port = 0;
    for (const char *p = colon + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || port > 65535)
            return false;
        port = port * 10 + (unsigned long)(*p - '0');
    }
    return port >= 1 && port <= 65535;
}

/* Printable ASCII without space: shm names and HTTP paths. */
static bool is_graphic_ascii(const char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    }
    return true;
}

/* No control bytes; UTF-8 passes. */
static bool has_no_control(const char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return false;
    }
    return true;
}

bool cfg_shm_name_is_valid(const char *name)
{
    size_t n = strlen(name);

    return n >= 2 && n <= CFG_SHM_NAME_LIMIT && name[0] == '/' && strchr(name + 1, '/') == NULL &&
           is_graphic_ascii(name);
}

bool cfg_http_path_is_valid(const char *path)
{
    return path[0] == '/' && strlen(path) < CFG_PATH_MAX && is_graphic_ascii(path);
}

bool cfg_health_initial_is_valid(const char *text)
{
    return strcmp(text, "unknown") == 0 || strcmp(text, "healthy") == 0;
}

bool cfg_file_path_is_valid(const char *path)
{
    return strlen(path) < CFG_PATH_MAX && has_no_control(path);
}

bool cfg_socket_path_is_valid(const char *path)
{
    size_t n = strlen(path);

    return n >= 1 && n <= CFG_SOCKET_PATH_LIMIT && has_no_control(path);
}

bool cfg_model_is_valid(const char *model)
{
    return strlen(model) < CFG_MODEL_MAX && has_no_control(model);
}

/* ---- messages -------------------------------------------------------------- */

void cfg_set_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- worker URLs ----------------------------------------------------------- */

/* Whether the parsed URL has the part at all (an empty query counts). */
static bool url_has_part(CURLU *u, CURLUPart part)
{
    char *value = NULL;
    CURLUcode uc = curl_url_get(u, part, &value, 0);

    curl_free(value);
    return uc == CURLUE_OK;
}

int cfg_canon_worker_url(const char *url, char *canon, size_t canon_len, char *id, size_t id_len,
                         char *err, size_t err_len)
{
    static const struct {
        CURLUPart part;
        const char *reason;
    } refused[] = {
        {CURLUPART_USER, "user info is not allowed"},
        {CURLUPART_PASSWORD, "user info is not allowed"},
        {CURLUPART_QUERY, "a query is not allowed"},
        {CURLUPART_FRAGMENT, "a fragment is not allowed"},
        {CURLUPART_ZONEID, "an IPv6 zone id is not allowed"},
    };
    CURLU *u;
    CURLUcode uc;
    char *scheme = NULL;
    char *host = NULL;
    char *port = NULL;
    char *path = NULL;
    const char *id_host;
    size_t id_host_len;
    uint64_t port_v;
    int n;
    int rc = -EINVAL;

    cfg_set_err(err, err_len, "%s", "");
    if (id != NULL && id_len > 0)
        id[0] = '\0';
    if (url == NULL || canon == NULL || canon_len == 0) {
        cfg_set_err(err, err_len, "no URL");
        return -EINVAL;
    }
    u = curl_url();
    if (u == NULL) {
        cfg_set_err(err, err_len, "out of memory");
        return -ENOMEM;
    }
    uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc != CURLUE_OK) {
        rc = uc == CURLUE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
        cfg_set_err(err, err_len, "%s", curl_url_strerror(uc));
        goto out_cleanup;
    }
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        cfg_set_err(err, err_len, "the scheme must be http or https");
        goto out_cleanup;
    }
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        if (url_has_part(u, refused[i].part)) {
            cfg_set_err(err, err_len, "%s", refused[i].reason);
            goto out_cleanup;
        }
    }
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0') {
        cfg_set_err(err, err_len, "a host is required");
        goto out_cleanup;
    }
    if (curl_url_get(u, CURLUPART_PORT, &port, 0) != CURLUE_OK) {
        cfg_set_err(err, err_len, "an explicit port is required");
        goto out_cleanup;
    }
    if (cfg_parse_uint(port, &port_v) != 0 || port_v < 1 || port_v > 65535) {
        cfg_set_err(err, err_len, "the port must be in 1..65535");
        goto out_cleanup;
    }
    if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK && path[0] != '\0' &&
        strcmp(path, "/") != 0) {
        cfg_set_err(err, err_len, "the path must be empty or /");
        goto out_cleanup;
    }
    /* Host names are case-insensitive: one spelling, so duplicates compare equal. */
    for (char *c = host; *c != '\0'; c++) {
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    }
    n = snprintf(canon, canon_len, "%s://%s:%" PRIu64, scheme, host, port_v);
    if (n < 0 || (size_t)n >= canon_len) {
        canon[0] = '\0';
        cfg_set_err(err, err_len, "longer than %zu characters as scheme://host:port",
                    canon_len - 1);
        rc = -ENOSPC;
        goto out_cleanup;
    }
    id_host = host;
    id_host_len = strlen(host);
    if (host[0] == '[' && id_host_len >= 2) {
        id_host = host + 1;
        id_host_len -= 2;
    }
    if (id != NULL && id_len > 0) {
        n = snprintf(id, id_len, "%.*s:%" PRIu64, (int)id_host_len, id_host, port_v);
        if (n < 0 || (size_t)n >= id_len)
            id[0] = '\0';
    }
    rc = 0;
out_cleanup:
    curl_free(path);
    curl_free(port);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

int cfg_check_worker_url(const char *url, char *id, size_t id_len, char *err, size_t err_len)
{
    char canon[CFG_URL_MAX];
    int rc = cfg_canon_worker_url(url, canon, sizeof(canon), id, id_len, err, err_len);

    return rc == -ENOSPC ? -EINVAL : rc;
}

bool cfg_addr_or_empty_is_valid(const char *addr)
{
    char host[CFG_ADDR_MAX];
    uint16_t port;
    return addr[0] == '\0' || cfg_parse_host_port(addr, host, sizeof(host), &port) == 0;
}

bool cfg_otlp_endpoint_is_valid(const char *url)
{
    if (url[0] == '\0')
        return true;
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return false;
    for (const char *p = url; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return strlen(url) < CFG_URL_MAX;
}

bool cfg_cors_origin_is_valid(const char *text)
{
    if (strcmp(text, "*") == 0)
        return true;
    const char *rest = strncmp(text, "http://", 7) == 0    ? text + 7
                       : strncmp(text, "https://", 8) == 0 ? text + 8
                                                           : NULL;
    if (rest == NULL || *rest == '\0')
        return false;
    for (const char *c = rest; *c != '\0'; c++)
        if (!(isalnum((unsigned char)*c) || *c == '.' || *c == '-' || *c == ':' || *c == '[' ||
              *c == ']'))
            return false;
    return true;
}

bool cfg_cors_header_is_valid(const char *text)
{
    if (strcmp(text, "*") == 0)
        return true;
    if (*text == '\0')
        return false;
    for (const char *c = text; *c != '\0'; c++)
        if (!(isalnum((unsigned char)*c) || strchr("!#$%&'*+-.^_`|~", *c) != NULL))
            return false;
    return true;
}

/* An RFC 9110 token: what a header name may be. */
bool cfg_header_name_is_valid(const char *text)
{
    return strcmp(text, "*") != 0 && cfg_cors_header_is_valid(text);
}

/* GnuTLS parses the string itself when the listener starts; here only its
 * shape: printable ASCII, no spaces, so a typo is named at load time. */
bool cfg_tls_priorities_is_valid(const char *text)
{
    size_t n = strlen(text);
    if (n > 255)
        return false;
    for (const char *c = text; *c != '\0'; c++)
        if (*c <= ' ' || *c > '~')
            return false;
    return true;
}

/* Letters, digits, '-' and '.', labels of 1..63, at most 253 in all. */
bool cfg_dns_name_is_valid(const char *text)
{
    size_t n = strlen(text), label = 0;
    if (n == 0 || n > 253 || text[0] == '.' || text[n - 1] == '.')
        return false;
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '.') {
            if (label == 0)
                return false;
            label = 0;
        } else if (isalnum((unsigned char)*c) || *c == '-') {
            if (++label > 63)
                return false;
        } else {
            return false;
        }
    }
    return true;
}

bool cfg_tls_version_is_valid(const char *version)
{
    return strcmp(version, "1.2") == 0 || strcmp(version, "1.3") == 0;
}
