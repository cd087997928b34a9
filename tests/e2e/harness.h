/*
 * End-to-end test harness: everything an e2e test needs to run the real
 * binaries (switchyard-controlplane, switchyard-dataplane,
 * switchyard-mockworker) on loopback and talk to them, so that a test reads
 * as "start these, send that, wait until this holds".
 *
 * Context. One test context is active at a time: a private temp dir
 * (mkdtemp under /tmp) holding config files, process logs and Unix sockets;
 * the processes started, the shm names and ports handed out, and the
 * background requests still running. It begins with h_setup() (or lazily,
 * with the first call that needs it) and ends with h_teardown(), which stops
 * every process (SIGTERM, a deadline, then SIGKILL), aborts and frees
 * background requests, unlinks shm segments and removes the temp dir.
 * Teardown is idempotent and also registered with atexit(), so a test that
 * never reaches its own cleanup still leaves nothing running. Use H_TEST(fn)
 * in the cmocka test table: it wraps fn with h_setup/h_teardown and lets
 * teardown know whether fn failed, in which case it prints the tail of every
 * process's log. Teardown fails (cmocka reports an error) when a process
 * the test did not stop itself crashed or exited, when one exits non-zero or
 * of a signal other than SIGTERM at teardown, or when a log holds a sanitizer
 * report. SWITCHYARD_TEST_LOGS=1 prints the logs always;
 * SWITCHYARD_KEEP_TMP=1 keeps the temp dir of a failed test. A test binary
 * killed by SIGTERM/SIGINT (the runner's time limit) SIGKILLs its children
 * and unlinks its shm segments on the way out; only its temp dir remains.
 *
 * Children and the death of the test binary. Processes are started with
 * fork + prctl(PR_SET_PDEATHSIG, SIGKILL) + execv rather than posix_spawn:
 * posix_spawn cannot ask the kernel to kill the child when its parent dies,
 * and a test binary killed by a timeout or a crash must not leave daemons
 * holding ports and shm. A wrapper binary could do the same but would need a
 * build rule of its own. The child only calls async-signal-safe functions
 * between fork and exec (everything is prepared before fork), so forking
 * while background request threads run is safe. The death signal follows the
 * *thread* that forked: start processes from the test's main thread only.
 *
 * Ports. h_free_port() binds 127.0.0.1:0, reads the port back and closes the
 * socket. The kernel hands such ports out from the odd half of the ephemeral
 * range, away from the even ports connect() prefers, so client sockets rarely
 * take one in the short window before the daemon binds it. A per-process
 * bitmap never hands the same port out twice in one binary, and an
 * abstract-namespace Unix socket named after the port, bound for the
 * duration of the test, stops parallel test binaries from taking the same
 * port: the kernel drops that claim by itself when the binary dies.
 *
 * Threads. Process, context and config functions belong to the test's main
 * thread. The HTTP helpers (harness_http.c) may be called from any thread;
 * each call uses its own curl handle and connection.
 *
 * Errors. Actions return 0 or a negative errno; functions returning a
 * pointer return NULL on failure. Nothing here asserts: tests assert on the
 * return values, so a failure is reported on the test's own line.
 */
#ifndef SY_TESTS_E2E_HARNESS_H
#define SY_TESTS_E2E_HARNESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H_PATH_MAX         256
#define H_NAME_MAX         64
#define H_URL_MAX          256
#define H_MAX_WORKERS      16
#define H_BODY_MAX         (16u << 20) /* cap of every response buffer */
#define H_HTTP_TIMEOUT_MS  30000       /* default whole-request timeout */
#define H_READY_TIMEOUT_MS 10000       /* default wait for a daemon to come up */
#define H_STOP_TIMEOUT_MS  5000        /* teardown: SIGTERM to SIGKILL */

/* ---- context and cmocka glue ------------------------------------------- */

/*
 * cmocka fixtures. h_setup begins a fresh context (ending a leftover one
 * first); h_teardown ends it and returns -1 when a process misbehaved (see
 * the file comment), which cmocka reports as a failed teardown.
 */
int h_setup(void **state);
int h_teardown(void **state);

/* A test function plus what H_TEST needs to know about it. */
#define H_TEST_MAGIC 0x53595445u
struct h_test_def {
    uint32_t magic; /* H_TEST_MAGIC: tells h_setup that *state is one of these */
    void (*fn)(void **state);
};

/* Runs def->fn and records that it returned (i.e. did not fail). */
void h_run_test(void **state);

/*
 * A cmocka test table entry running fn inside its own context:
 *   const struct CMUnitTest tests[] = { H_TEST(test_foo), ... };
 */
/* clang-format off */
#define H_TEST(f) {#f, h_run_test, h_setup, h_teardown, &(struct h_test_def){H_TEST_MAGIC, f}}
/* clang-format on */

/* The active context's temp dir (begins a context if none is active). */
const char *h_tmpdir(void);

/* Writes "<tmpdir>/<name>" into buf. Returns 0, -ENAMETOOLONG or -errno. */
int h_tmp_path(const char *name, char *buf, size_t len);

/* Monotonic clock in milliseconds. */
int64_t h_now_ms(void);

/* ---- unique names ------------------------------------------------------- */

/*
 * Reserves a free TCP port on 127.0.0.1 for the rest of the context (see the
 * file comment). Returns 0 and *port, or a negative errno.
 */
int h_free_port(uint16_t *port);

/*
 * For tests that speak HTTP over a raw socket: waits up to timeout_ms for
 * fd to be readable and appends what one read returns to buf[*len..cap),
 * keeping buf NUL-terminated. Returns the bytes read, 0 at EOF, or a
 * negative errno (-ETIMEDOUT, -ENOBUFS when buf is full).
 */
ssize_t h_fd_read_more(int fd, char *buf, size_t cap, size_t *len, int timeout_ms);

/*
 * Writes a fresh POSIX shm name "/sy-test-<pid>-<n>" into buf and remembers
 * it: teardown shm_unlink()s it whether or not anyone created it.
 */
int h_shm_name(char *buf, size_t len);

/* Writes "http://127.0.0.1:<port><path>" into buf (path may be NULL or ""). */
int h_url(char *buf, size_t len, uint16_t port, const char *path);

/* ---- config files ------------------------------------------------------- */

/*
 * Writes text to "<tmpdir>/<name>" and, when path is not NULL, the file's
 * full path into path. Returns 0 or a negative errno.
 */
int h_write_file(const char *name, const char *text, char *path, size_t path_len);

/* The lower-case hex SHA-256 of text: a keys file's key_sha256 for a key. */
void h_sha256_hex(const char *text, char out[65]);

struct h_worker_spec {
    char url[H_URL_MAX];    /* required */
    char id[H_NAME_MAX];    /* empty = omitted (router derives it) */
    char model[H_NAME_MAX]; /* empty = omitted */
    char role[16];          /* empty = omitted; regular|prefill|decode */
    /* NULL = none; more keys of this worker (e.g. a kv_events mapping),
     * written unindented like the *_extra strings of struct h_config. Set
     * it after h_config_add_worker; the string is the caller's. */
    const char *extra;
};

/*
 * Inputs and outputs of h_config_write, caller storage; zero it first.
 * Empty names and zero ports are filled in by h_config_write (fresh shm
 * name, admin socket in the temp dir, free ports) so the test can read the
 * values back. The *_extra strings are YAML lines written under their
 * section, indented by the harness (write them unindented, nested keys
 * indented relative to each other); extra_yaml is appended at top level.
 */
struct h_config {
    char shm_name[H_NAME_MAX];
    char admin_socket[H_PATH_MAX];
    uint16_t admin_port;         /* controlplane.admin_listen */
    uint16_t dataplane_port;     /* dataplane.listen */
    const char *policy;          /* NULL = omitted; e.g. "round_robin" */
    const char *health_interval; /* NULL = omitted; e.g. "100ms" */
    struct h_worker_spec workers[H_MAX_WORKERS];
    size_t n_workers;
    const char *shm_extra;
    const char *controlplane_extra;
    const char *health_extra;
    const char *dataplane_extra;
    const char *policy_extra;
    const char *extra_yaml;
    char path[H_PATH_MAX]; /* output: the file written */
};

/* Appends a worker (id, model, role may be NULL). Returns 0 or -ENOSPC. */
int h_config_add_worker(struct h_config *cfg, const char *url, const char *id, const char *model,
                        const char *role);

/* Fills the unset fields and writes "<tmpdir>/<name>" (NULL = config.yaml). */
int h_config_write(struct h_config *cfg, const char *name);

/* ---- processes ---------------------------------------------------------- */

/*
 * A process started by the harness. Owned by the context (stable pointer
 * until teardown); main thread only.
 */
struct h_proc {
    char name[H_NAME_MAX];     /* e.g. "mockworker" */
    char log_path[H_PATH_MAX]; /* its stdout and stderr */
    pid_t pid;
    bool exited;     /* reaped; wait_status is valid */
    bool expected;   /* the test stopped or killed it itself */
    int wait_status; /* as from waitpid */
    /* Where teardown sends its SIGTERM when not pid: a wrapper that blocks
     * SIGTERM (unshare, harness_pidns.h) passes it to the daemon it runs. */
    pid_t term_pid;
};

/* "$SWITCHYARD_BUILD_DIR/<bin>" (default build dir "build") into buf. */
int h_bin_path(const char *bin, char *buf, size_t len);

/*
 * Starts argv[0] (a path) with argv, stdin from /dev/null, stdout and stderr
 * to "<tmpdir>/<name>-<n>.log". Returns 0 and *out, -ENOENT when argv[0] is
 * not executable, or another negative errno (exec failure included).
 */
int h_spawn(const char *name, const char *const argv[], struct h_proc **out);

/* switchyard-mockworker --listen 127.0.0.1:<port> extra... (extra may be NULL). */
int h_start_mockworker(uint16_t port, const char *const extra[], struct h_proc **out);

/* switchyard-controlplane / switchyard-dataplane --config <config_path>. */
int h_start_controlplane(const char *config_path, struct h_proc **out);
int h_start_dataplane(const char *config_path, struct h_proc **out);

/* Reaps p if it has exited; true while it runs. */
bool h_proc_is_running(struct h_proc *p);

/* Sends sig; the test then expects p to exit (teardown will not complain). */
int h_proc_signal(struct h_proc *p, int sig);

/* Waits for p to exit. Returns 0 (status in *wait_status if not NULL) or -ETIMEDOUT. */
int h_proc_wait(struct h_proc *p, int timeout_ms, int *wait_status);

/* SIGTERM, wait up to timeout_ms, then SIGKILL. 0 if it exited in time, else -ETIMEDOUT. */
int h_proc_stop(struct h_proc *p, int timeout_ms);

/* Prints the last max_lines lines of p's log to stderr. */
void h_proc_print_log(const struct h_proc *p, int max_lines);

/* True when a line of p's log contains needle. */
bool h_proc_log_contains(const struct h_proc *p, const char *needle);

/* ---- waiting ------------------------------------------------------------- */

typedef bool (*h_cond_fn)(void *arg);

/*
 * Polls cond(arg) every few milliseconds until it is true or timeout_ms
 * passed (cond runs once more at the deadline). Returns 0 or -ETIMEDOUT.
 */
int h_wait_until(h_cond_fn cond, void *arg, int timeout_ms);

/* Waits until GET url answers 200. Returns 0 or -ETIMEDOUT. */
int h_wait_http_ok(const char *url, int timeout_ms);

/* ---- HTTP (harness_http.c) ---------------------------------------------- */

/* A response. Caller storage; h_resp_fini frees what it owns. */
struct h_resp {
    long status; /* 0 when no response arrived */
    char *body;  /* NUL-terminated (also when empty); owned */
    size_t body_len;
    char *headers; /* raw header lines of the last response; owned */
    size_t headers_len;
    int curl_code; /* CURLE_OK, or why the transfer failed */
    int64_t elapsed_ms;
};

void h_resp_fini(struct h_resp *resp);

/* Case-insensitive header lookup; copies the trimmed value. 0 or -ENOENT. */
int h_resp_header(const struct h_resp *resp, const char *name, char *value, size_t len);

/* Parses the body as JSON: a new reference, or NULL. */
json_t *h_resp_json(const struct h_resp *resp);

struct h_req {
    const char *method; /* NULL = GET, or POST when body is set */
    const char *url;
    const char *body;           /* NULL = none */
    size_t body_len;            /* 0 = strlen(body) */
    const char *const *headers; /* NULL-terminated "Name: value" list, or NULL */
    int timeout_ms;             /* 0 = H_HTTP_TIMEOUT_MS */
};

/*
 * Performs one request on a fresh connection. Returns 0 when a response
 * arrived (any status), -EIO when the transfer failed (resp->curl_code says
 * why, resp holds what arrived), -ENOMEM. resp is always initialised.
 */
int h_http(const struct h_req *req, struct h_resp *resp);
int h_http_get(const char *url, struct h_resp *resp);
/* POST with Content-Type: application/json. */
int h_http_post_json(const char *url, const char *json, struct h_resp *resp);

/* One Server-Sent Event: the payload after "data: " and its arrival time. */
struct h_sse_event {
    char *data; /* NUL-terminated; owned */
    size_t len;
    int64_t t_ms; /* since the request started */
};

/* A streamed response. Caller storage; h_sse_fini frees it. */
struct h_sse {
    struct h_resp resp;         /* status, headers, and the whole raw body */
    struct h_sse_event *events; /* every event in order, "[DONE]" included */
    size_t n_events;
    bool saw_done;  /* an event "[DONE]" arrived */
    bool malformed; /* something was not exactly "data: <payload>\n\n" */
};

void h_sse_fini(struct h_sse *sse);

/* POSTs json and splits the streamed body into events. Returns as h_http. */
int h_http_stream(const char *url, const char *json, struct h_sse *sse);

/* The same for any request (method, headers, timeout). */
int h_http_stream_req(const struct h_req *req, struct h_sse *sse);

/* ---- Prometheus samples (harness_metrics.c) ------------------------------ */

/*
 * The value of the sample line "<sample> <value>" in an exposition text:
 * sample is the series exactly as written, labels included
 * ("switchyard_worker_load{worker=\"w1\"}"), matched at a line start and
 * followed by a space, so a series is never mistaken for a longer one it
 * prefixes. Integer values only (counters, gauges read as whole numbers).
 * -1 when text is NULL or holds no such line.
 */
long long h_metric_in(const char *text, const char *sample);

/*
 * GETs url (a /metrics page) and reads one sample of it. Returns 0 and
 * *value; -ENOENT when the page holds no such sample, -EIO when no response
 * arrived, -EPROTO when the status is not 200, -ENOMEM; *value is -1 on
 * every error. For tests that assert on how the scrape went.
 */
int h_metric_get(const char *url, const char *sample, long long *value);

/* h_metric_get's value alone: -1 when the scrape failed, was not 200, or
 * the sample is absent. */
long long h_metric_at(const char *url, const char *sample);

/* ---- background ("abortable") requests ---------------------------------- */

enum h_abort_at {
    H_ABORT_UNSET = 0,     /* same as H_ABORT_NEVER */
    H_ABORT_NEVER,         /* run to completion, or until h_async_abort */
    H_ABORT_AFTER_MS,      /* close the connection ms after start, whatever the phase */
    H_ABORT_AFTER_HEADERS, /* close as soon as the response headers are complete */
    H_ABORT_AFTER_BYTES,   /* close once at least `bytes` body bytes have arrived */
};

struct h_async_opts {
    const char *method;         /* NULL = POST when body is set, else GET */
    const char *const *headers; /* NULL-terminated extra headers, or NULL */
    enum h_abort_at abort_at;
    int64_t ms;     /* H_ABORT_AFTER_MS */
    size_t bytes;   /* H_ABORT_AFTER_BYTES */
    int timeout_ms; /* 0 = H_HTTP_TIMEOUT_MS */
};

/* Observable progress of a background request (a consistent snapshot). */
struct h_async_state {
    bool done;        /* finished, failed or aborted; the connection is closed */
    bool aborted;     /* we closed the connection on purpose */
    bool got_headers; /* response headers complete */
    long status;
    size_t body_bytes;
    int curl_code;
    int64_t headers_ms; /* since start; -1 before headers */
    int64_t body_ms;    /* first body byte, since start; -1 before */
    int64_t done_ms;    /* since start; -1 before done */
};

struct h_async;

/*
 * Starts a request (JSON body when body is set) in its own thread, which
 * closes the connection when opts says so or when h_async_abort is called.
 * The request belongs to the context: teardown aborts and frees it unless
 * the test already called h_async_destroy. Returns 0 and *out, or -errno.
 */
int h_async_start(const char *url, const char *body, const struct h_async_opts *opts,
                  struct h_async **out);

/* Closes the connection now. 0, or -EALREADY when the request was done. */
int h_async_abort(struct h_async *a);

void h_async_get_state(struct h_async *a, struct h_async_state *st);

/* Waits until done. 0 or -ETIMEDOUT. */
int h_async_wait(struct h_async *a, int timeout_ms);

/* Waits until the response headers are complete (or the request is done). */
int h_async_wait_headers(struct h_async *a, int timeout_ms);

/* Waits until at least `bytes` body bytes arrived (or the request is done).
 * 0 or -ETIMEDOUT. */
int h_async_wait_body(struct h_async *a, size_t bytes, int timeout_ms);

/* After done: moves the response (status, body, headers) into resp. */
int h_async_take_resp(struct h_async *a, struct h_resp *resp);

/* Aborts if running, joins its thread, frees. NULL is a no-op. */
void h_async_destroy(struct h_async *a);

/* Destroys every background request not destroyed yet (teardown calls it). */
void h_async_destroy_all(void);

/* ---- the mock worker ---------------------------------------------------- */

/* A running mock worker. Caller storage; the process belongs to the context. */
struct h_mock {
    struct h_proc *proc;
    uint16_t port;
    char url[64]; /* "http://127.0.0.1:PORT" */
};

/*
 * Picks a port, starts switchyard-mockworker with --listen and the extra
 * arguments (NULL-terminated), and waits until GET /health answers 200
 * (H_READY_TIMEOUT_MS; fails early when the process exits).
 */
int h_mock_start(struct h_mock *m, ...) __attribute__((sentinel));
int h_mock_startv(struct h_mock *m, const char *const extra[]);

/* GET <base>/mock/stats parsed: a new reference, or NULL. */
json_t *h_mock_stats(const char *base_url);

/* One integer field of /mock/stats. 0, -EIO, or -ENOENT when absent. */
int h_mock_stat_int(const char *base_url, const char *key, long long *value);

/* Waits until /mock/stats field key equals want. 0 or -ETIMEDOUT. */
int h_wait_mock_stat(const char *base_url, const char *key, long long want, int timeout_ms);

/* POST <base>/mock/faults with json. 0 when answered 2xx, else -EIO. */
int h_mock_faults(const char *base_url, const char *json);

/* POST <base>/mock/reset. 0 when answered 2xx, else -EIO. */
int h_mock_reset(const char *base_url);

#endif
