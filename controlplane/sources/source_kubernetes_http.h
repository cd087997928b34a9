/*
 * The Kubernetes API client of the Kubernetes worker source: one transfer
 * at a time, a list (a PodList read item by item as it arrives,
 * source_kubernetes_list.h) or a watch (a chunked stream of
 * newline-delimited JSON events, each line parsed with jansson as it
 * completes). libcurl multi on the control plane's loop, like
 * the health prober: an inner epoll set whose descriptor the loop watches,
 * common/curl_epoll for the glue, a timeout for epoll_wait.
 *
 * Bounds: one list item or watch line at most KUBE_LINE_MAX (the API
 * server's objects are at most about 1.5 MiB), a list answered with an
 * error status at most KUBE_STATUS_BODY_MAX; past either the transfer
 * fails. A list's items are never held together: each is handed up as it
 * completes, and on_item may refuse one (a page with too many), which
 * stops the transfer at once. A watch that receives nothing for silence_ms
 * (its timeoutSeconds plus a grace) is cut and reported as silent, so a
 * connection that died without a FIN cannot hold the source forever.
 *
 * Reporting up: registered callbacks. on_event runs from inside curl's
 * write callback, once per event line, and on_item once per list item:
 * they may record, never start or stop a transfer. on_done runs from kube_api_run once the transfer
 * ended. The json passed is borrowed for the call.
 *
 * Threading: the control plane's loop thread only.
 */
#ifndef SY_CONTROLPLANE_SOURCE_KUBERNETES_HTTP_H
#define SY_CONTROLPLANE_SOURCE_KUBERNETES_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define KUBE_LINE_MAX        (4u << 20)
#define KUBE_STATUS_BODY_MAX (1u << 20)

enum kube_xfer {
    KUBE_XFER_NONE = 0,
    KUBE_XFER_LIST,
    KUBE_XFER_WATCH,
};

/* How a transfer ended. */
struct kube_result {
    enum kube_xfer kind;
    long http_status;  /* 0: no response */
    bool transport_ok; /* curl finished without error (a watch: the server ended it cleanly) */
    bool silent;       /* a watch cut for silence */
    bool got_body;     /* a watch: at least one byte arrived */
    /* A list: the PodList without its items (they went to on_item; "items"
     * is an empty array when the body had one), or the Status of an error
     * status; NULL when unparsable. */
    const json_t *body;
    char why[160]; /* for log lines: curl's error, or "HTTP 500", ... */
};

typedef void (*kube_event_fn)(void *user, const json_t *event);
/* false refuses the item, and so the page: the transfer stops. */
typedef bool (*kube_item_fn)(void *user, const json_t *item);
typedef void (*kube_done_fn)(void *user, const struct kube_result *r);

struct kube_api_opts {
    const char *ca_file; /* borrowed; NULL or "" = the system's CAs */
    kube_event_fn on_event;
    kube_item_fn on_item; /* NULL: items are read and dropped */
    kube_done_fn on_done;
    void *user;
};

struct kube_api;

int kube_api_create(const struct kube_api_opts *opts, struct kube_api **out);
void kube_api_destroy(struct kube_api *a);

/* The descriptor to watch for EPOLLIN in the loop's epoll set. */
int kube_api_fd(const struct kube_api *a);

/* Whether a transfer is running. */
bool kube_api_busy(const struct kube_api *a);

/*
 * Starts a GET of url (a list, or a watch when kind is KUBE_XFER_WATCH)
 * with token as bearer ("" = none). One transfer at a time: -EBUSY while
 * one runs. silence_ms: watches only. 0, -EBUSY, -ENOMEM, -EIO.
 */
int kube_api_start(struct kube_api *a, enum kube_xfer kind, const char *url, const char *token,
                   uint64_t silence_ms);

/* Stops the running transfer without reporting it. */
void kube_api_cancel(struct kube_api *a);

/* Drives curl; reports a finished transfer through on_done. */
void kube_api_run(struct kube_api *a, uint64_t now_ms);

/* Milliseconds until kube_api_run has work (-1 none, 0 now). */
int kube_api_timeout_ms(const struct kube_api *a, uint64_t now_ms);

/*
 * Hands bytes to the watch line splitter as a running watch's 200 body
 * would arrive, without a transfer: each completed line goes to on_event.
 * For the fuzz target and tests, which have no API server. false when a
 * line was refused (too long, or no JSON object): a real watch is dropped
 * then, and the splitter's buffer is emptied here for the next caller.
 */
bool kube_api_feed_watch(struct kube_api *a, const char *bytes, size_t len);

#endif
