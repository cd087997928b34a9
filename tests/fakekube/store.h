/*
 * The fake Kubernetes API server's state (see docs/fakekube.md): the pods
 * of every namespace, the event log watches read from, the label-selector
 * matcher and the faults a test switches on. One global store behind one
 * mutex; a condition variable wakes every blocked watch on any change, so
 * each watch thread (one per connection) waits for its next event without
 * polling.
 *
 * Versions behave as the real API server's: one cluster-wide counter bumped
 * by every write; a pod's metadata.resourceVersion is the version of its
 * last write; a list carries the version it was taken at; a watch from
 * version V sends every later event; a version older than the compaction
 * point answers 410 Gone. The fake keeps every event (tests are short);
 * the "expire" fault moves the compaction point to now.
 *
 * Threading: every function may be called from any thread.
 */
#ifndef SY_TESTS_FAKEKUBE_STORE_H
#define SY_TESTS_FAKEKUBE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define FK_SEL_TERMS_MAX 16

/* One equality-based requirement: key=value, key!=value, key, !key. */
struct fk_sel_term {
    char key[128];
    char value[128];
    enum { FK_SEL_EQ = 1, FK_SEL_NEQ, FK_SEL_EXISTS, FK_SEL_NOT_EXISTS } op;
};

struct fk_selector {
    struct fk_sel_term terms[FK_SEL_TERMS_MAX];
    size_t n;
};

/* Parses a labelSelector ("" or NULL: everything). 0 or -EINVAL. */
int fk_selector_parse(const char *text, struct fk_selector *out);

/* Whether a pod object's metadata.labels satisfy every term. */
bool fk_selector_matches(const struct fk_selector *sel, const json_t *pod);

/* A Status object (kind Status) with code, reason and message. New reference. */
json_t *fk_status(int code, const char *reason, const char *message);

void fk_store_init(uint64_t bookmark_interval_ms);
void fk_store_fini(void);
/* Wakes every watch so it can end; later waits return at once. */
void fk_store_shutdown(void);

/*
 * PUT: creates or replaces ns/name from the Pod object body (borrowed).
 * A new pod gets a fresh uid; a replaced one keeps its uid unless the body
 * names one. Returns the stored object (new reference) and sets *created.
 * NULL with *err_status (400) when the body is no object.
 */
json_t *fk_store_put(const char *ns, const char *name, const json_t *body, bool *created,
                     int *err_status);

/* DELETE: removes ns/name. The removed object (new reference), or NULL when absent. */
json_t *fk_store_delete(const char *ns, const char *name);

/* GET of one pod: new reference or NULL. */
json_t *fk_store_get(const char *ns, const char *name);

/*
 * A PodList of ns matching sel, sorted by name. limit 0: all. cont: the
 * continue token of the previous page, or NULL. Returns the list (new
 * reference) or a Status object with *status set to its code.
 */
json_t *fk_store_list(const char *ns, const struct fk_selector *sel, long limit, const char *cont,
                      int *status);

/* The flood_list fault (docs/fakekube.md): while items > 0, every list of
 * pods answers `items` copies of the item template instead of the store,
 * named flood-0000000.. when `named`, paged by limit/continue as the real
 * server pages when `honour_limit`, else all in one page whatever the
 * limit (a hostile server). */
struct fk_flood {
    size_t items;
    bool named;
    bool honour_limit;
    char *item;  /* the template as JSON text (malloc'd) */
    uint64_t rv; /* fk_store_flood: the store's version now, which the list is "taken at" */
};

/* A copy of the flood fault (free out->item): false when it is off. */
bool fk_store_flood(struct fk_flood *out);

/* Faults (POST /fake/faults): the body's keys applied at once. 0 or -EINVAL. */
int fk_store_faults(const json_t *body, char *err, size_t err_len);

/* 0 when a request may be served; else the HTTP status to answer (401, or
 * the fail_status fault) and a Status object in *status_obj. */
int fk_store_gate(const char *authorization, json_t **status_obj);

/* One watch: caller storage, fk_watch_start / fk_watch_next / fk_watch_fini. */
struct fk_watch {
    char ns[256];
    struct fk_selector sel;
    uint64_t rv;          /* last version sent */
    size_t log_pos;       /* next event log index to look at */
    bool bookmarks;       /* allowWatchBookmarks */
    uint64_t deadline_ms; /* timeoutSeconds, monotonic */
    uint64_t last_sent_ms;
    uint64_t expire_gen, sever_gen, silence_gen;
    bool silenced;
    bool ending;     /* an ERROR was sent: end after it */
    json_t *initial; /* synthetic ADDED events still to send (resourceVersion "" or "0") */
    size_t initial_pos;
};

/*
 * Starts a watch from resource_version ("" or "0": the current state as
 * ADDED events first). Returns 0, or 410 when the version is too old (the
 * caller sends the ERROR event fk_watch_next then yields), or 400.
 */
int fk_watch_start(struct fk_watch *w, const char *ns, const struct fk_selector *sel,
                   const char *resource_version, bool bookmarks, long timeout_s);

enum fk_watch_step {
    FK_WATCH_EVENT = 1, /* *line holds one event (owned by the caller, free()) */
    FK_WATCH_END,       /* timeoutSeconds passed, or after an ERROR: end cleanly */
    FK_WATCH_SEVER,     /* sever_watches or shutdown: cut the connection */
};

/* Blocks until the watch has something to do. */
enum fk_watch_step fk_watch_next(struct fk_watch *w, char **line);

void fk_watch_fini(struct fk_watch *w);

#endif
