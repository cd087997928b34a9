/*
 * Pinned prefill blocks and the decode side's reads (see pd_pins.h). The
 * table is a ring searched linearly by a 64-bit hash of the request id:
 * a few thousand entries, one short scan per P/D request, simpler than a
 * hash map and cheap next to an HTTP request.
 */
#include "tests/mockworker/pd_pins.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t id_hash(const char *id)
{
    uint64_t h = XXH3_64bits(id, strlen(id));
    return h != 0 ? h : 1;
}

int mw_pd_pins_init(struct mw_pd_pins *p, uint64_t lease_ms)
{
    memset(p, 0, sizeof(*p));
    p->lease_ns = lease_ms * 1000000u;
    return -pthread_mutex_init(&p->mu, NULL);
}

void mw_pd_pins_fini(struct mw_pd_pins *p)
{
    pthread_mutex_destroy(&p->mu);
}

static void unpin(struct mw_pd_pins *p, struct mw_pd_pin *e)
{
    if (!e->pinned)
        return;
    e->pinned = false;
    p->pinned_blocks -= e->blocks;
    p->pinned_requests--;
}

/* Drops the expired leases. Caller holds mu. */
static void expire(struct mw_pd_pins *p, uint64_t now)
{
    for (size_t i = 0; i < MW_PD_PINS_MAX && p->pinned_requests > 0; i++) {
        struct mw_pd_pin *e = &p->ring[i];
        if (e->pinned && now >= e->expiry_ns) {
            unpin(p, e);
            p->expired++;
        }
    }
}

void mw_pd_pins_add(struct mw_pd_pins *p, const char *request_id, uint32_t blocks)
{
    uint64_t now = now_ns();
    pthread_mutex_lock(&p->mu);
    expire(p, now);
    struct mw_pd_pin *e = &p->ring[p->next];
    p->next = (p->next + 1) % MW_PD_PINS_MAX;
    if (e->pinned) { /* the ring is full of live pins: the oldest one goes */
        unpin(p, e);
        p->expired++;
    }
    *e = (struct mw_pd_pin){
        .id_hash = id_hash(request_id),
        .blocks = blocks,
        .expiry_ns = now + p->lease_ns,
        .pinned = true,
    };
    p->pinned_blocks += blocks;
    p->pinned_requests++;
    pthread_mutex_unlock(&p->mu);
}

int mw_pd_pins_read(struct mw_pd_pins *p, const char *request_id)
{
    uint64_t h = id_hash(request_id);
    uint64_t now = now_ns();
    int rc = -ENOENT;
    pthread_mutex_lock(&p->mu);
    expire(p, now);
    for (size_t i = 0; i < MW_PD_PINS_MAX; i++) {
        struct mw_pd_pin *e = &p->ring[i];
        if (e->id_hash != h)
            continue;
        if (e->pinned) {
            unpin(p, e);
            p->reads++;
            rc = 0;
        } else if (e->expiry_ns > now) {
            /* Consumed before its lease ran out: these blocks are gone. */
            p->read_twice++;
            rc = -EALREADY;
        }
        break;
    }
    if (rc == -ENOENT)
        p->read_unknown++;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void mw_pd_pins_to_json(struct mw_pd_pins *p, json_t *obj)
{
    pthread_mutex_lock(&p->mu);
    expire(p, now_ns());
    json_object_set_new(obj, "pinned_blocks", json_integer((json_int_t)p->pinned_blocks));
    json_object_set_new(obj, "pinned_requests", json_integer((json_int_t)p->pinned_requests));
    json_object_set_new(obj, "kv_reads", json_integer((json_int_t)p->reads));
    json_object_set_new(obj, "blocks_read_twice", json_integer((json_int_t)p->read_twice));
    json_object_set_new(obj, "kv_reads_unknown", json_integer((json_int_t)p->read_unknown));
    json_object_set_new(obj, "kv_lease_expired", json_integer((json_int_t)p->expired));
    pthread_mutex_unlock(&p->mu);
}

void mw_pd_pins_reset(struct mw_pd_pins *p)
{
    pthread_mutex_lock(&p->mu);
    p->reads = p->read_twice = p->read_unknown = p->expired = 0;
    pthread_mutex_unlock(&p->mu);
}

int mw_pd_pins_notify(const char *host, uint16_t port, const char *request_id)
{
    char portstr[8], body[512], msg[1024];
    snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
    json_t *j = json_pack("{s:s}", "remote_request_id", request_id);
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return -ENOMEM;
    snprintf(body, sizeof(body), "%s", text);
    free(text);
    int n = snprintf(msg, sizeof(msg),
                     "POST /mock/kv_read HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     host, portstr, strlen(body), body);
    if (n < 0 || (size_t)n >= sizeof(msg))
        return -ENAMETOOLONG;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, portstr, &hints, &ai) != 0 || ai == NULL)
        return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    struct timeval tv = {.tv_sec = 1};
    if (rc == 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
            rc = -errno;
    }
    freeaddrinfo(ai);
    if (rc == 0 && send(fd, msg, (size_t)n, MSG_NOSIGNAL) != n)
        rc = -EIO;
    char resp[64] = "";
    if (rc == 0 && recv(fd, resp, sizeof(resp) - 1, 0) < 12)
        rc = -EIO;
    if (rc == 0 && strncmp(resp + 9, "2", 1) != 0)
        rc = -EPROTO;
    if (fd >= 0)
        close(fd);
    return rc;
}
