/*
 * The e2e harness's context, names, config files and processes (the HTTP
 * side lives in harness_http.c; the contract is harness.h).
 *
 * There is one context per test binary at a time, a static struct touched
 * only by the test's main thread, plus an atexit handler and a SIGTERM/SIGINT
 * handler that reach the same struct: the exit handler runs the ordinary
 * idempotent teardown; the signal handler (a test binary killed by its time
 * limit) only does async-signal-safe things: SIGKILL the children and unlink
 * the shm segments, then dies of the same signal. Children die with the test
 * binary anyway through PR_SET_PDEATHSIG (see harness.h for why fork + prctl
 * + execv instead of posix_spawn).
 */
#include "tests/e2e/harness.h"
#include "tests/e2e/harness_load.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include <nettle/sha2.h>

/* The chaos soak (tests/soak/) restarts daemons hundreds of times. */
#define H_MAX_PROCS       1024
#define H_MAX_SHM         32
#define H_MAX_PORT_CLAIMS 64
#define H_LOG_TAIL_LINES  60
#define H_LOG_TAIL_BYTES  (64 * 1024)
#define H_CONFIG_MAX      (32 * 1024)
#define H_POLL_MS         5

/*
 * The active test context. Owned by this file, main thread only (plus the
 * signal handler, which only reads pids and shm paths); lives from
 * h_ctx_begin to h_ctx_end.
 */
struct h_ctx {
    bool active;
    bool have_def;      /* the test runs through H_TEST */
    bool test_returned; /* ... and its function returned */
    char tmpdir[H_PATH_MAX];
    struct h_proc procs[H_MAX_PROCS];
    bool stopped_by_teardown[H_MAX_PROCS];
    size_t n_procs;
    char shm_names[H_MAX_SHM][H_NAME_MAX];
    char shm_paths[H_MAX_SHM][H_NAME_MAX + 16]; /* "/dev/shm/NAME" for the signal handler */
    size_t n_shm;
    int port_claims[H_MAX_PORT_CLAIMS]; /* abstract Unix sockets held while the test runs */
    size_t n_port_claims;
    void (*fn)(void **state);
};

static struct h_ctx h_ctx;
static volatile sig_atomic_t h_ctx_in_signal_view; /* 1 while procs/shm are consistent */
static uint8_t h_ports_given[65536 / 8];           /* per process, never reset */
static unsigned h_shm_seq;
static pthread_once_t h_once = PTHREAD_ONCE_INIT;

static int h_teardown_ctx(void);

/* ---- small utilities ---------------------------------------------------- */

int64_t h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void h_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* snprintf into buf; -ENAMETOOLONG when it does not fit. */
static int h_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int h_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

static bool h_env_is_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* ---- exit and signal handlers ------------------------------------------- */

static void h_atexit(void)
{
    h_teardown_ctx();
}

/* Async-signal-safe: kill children, unlink shm, die of the same signal. */
static void h_on_fatal_signal(int sig)
{
    if (h_ctx_in_signal_view) {
        for (size_t i = 0; i < h_ctx.n_procs && i < H_MAX_PROCS; i++) {
            if (!h_ctx.procs[i].exited && h_ctx.procs[i].pid > 0)
                kill(h_ctx.procs[i].pid, SIGKILL);
        }
        for (size_t i = 0; i < h_ctx.n_shm && i < H_MAX_SHM; i++)
            unlink(h_ctx.shm_paths[i]);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void h_init_once(void)
{
    atexit(h_atexit);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = h_on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* Writes to a closed socket must fail with EPIPE, not kill the test. */
    signal(SIGPIPE, SIG_IGN);
}

/* ---- context ------------------------------------------------------------ */

static int h_ctx_begin(void)
{
    pthread_once(&h_once, h_init_once);
    if (h_ctx.active)
        return 0;
    memset(&h_ctx, 0, sizeof(h_ctx));
    if (h_fmt(h_ctx.tmpdir, sizeof(h_ctx.tmpdir), "/tmp/sy-e2e-%d-XXXXXX", (int)getpid()) != 0)
        return -ENAMETOOLONG;
    if (mkdtemp(h_ctx.tmpdir) == NULL) {
        int err = -errno;
        fprintf(stderr, "harness: mkdtemp %s: %s\n", h_ctx.tmpdir, strerror(errno));
        return err;
    }
    h_ctx.active = true;
    h_ctx_in_signal_view = 1;
    return 0;
}

const char *h_tmpdir(void)
{
    if (h_ctx_begin() != 0)
        return NULL;
    return h_ctx.tmpdir;
}

int h_tmp_path(const char *name, char *buf, size_t len)
{
    int rc = h_ctx_begin();
    if (rc != 0)
        return rc;
    return h_fmt(buf, len, "%s/%s", h_ctx.tmpdir, name);
}

int h_setup(void **state)
{
    const struct h_test_def *def = state != NULL ? *state : NULL;
    /* A context left by a test that bypassed teardown ends here. */
    h_teardown_ctx();
    int rc = h_ctx_begin();
    if (rc != 0)
        return -1;
    /* Only H_TEST passes a def; a group's state or NULL is left alone. */
    if (def != NULL && def->magic == H_TEST_MAGIC) {
        h_ctx.fn = def->fn;
        h_ctx.have_def = true;
    }
    return 0;
}

int h_teardown(void **state)
{
    (void)state;
    return h_teardown_ctx() == 0 ? 0 : -1;
}

void h_run_test(void **state)
{
    if (h_ctx.fn == NULL)
        fail_msg("h_run_test: no test function (use H_TEST in the test table)");
    h_ctx.fn(state);
    h_ctx.test_returned = true;
}

/* ---- unique names ------------------------------------------------------- */

static bool h_port_was_given(uint16_t port)
{
    return (h_ports_given[port / 8] >> (port % 8)) & 1u;
}

/* Binds an abstract Unix socket named after port: fails while another
 * process holds the same claim. Returns the fd or a negative errno. */
static int h_claim_port(uint16_t port)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "switchyard-e2e-port-%u",
                     (unsigned)port);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (bind(fd, (struct sockaddr *)&addr, alen) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* Asks the kernel for a currently free port on 127.0.0.1. */
static int h_kernel_port(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t alen = sizeof(addr);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &alen) != 0)
        rc = -errno;
    else
        *port = ntohs(addr.sin_port);
    close(fd);
    return rc;
}

/* The lowest port of the kernel's ephemeral range (32768 when unreadable). */
static unsigned h_ephemeral_low(void)
{
    unsigned lo = 32768, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%u %u", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

/*
 * A port that is free now, below the kernel's ephemeral range when there is
 * room there. A port inside the range can be taken, between a daemon's stop
 * and its restart on the same port, by the local end of any outgoing
 * connection (every test's clients make thousands), and the restarted
 * daemon's bind then fails with EADDRINUSE; below the range only a bind can
 * take it, and every bind of the tests goes through the claims below.
 */
static int h_candidate_port(uint16_t *port)
{
    static unsigned seed;
    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)h_now_ms();
    unsigned lo = 10000, hi = h_ephemeral_low();
    if (hi < lo + 2000)
        return h_kernel_port(port);
    for (int attempt = 0; attempt < 100; attempt++) {
        uint16_t p = (uint16_t)(lo + (unsigned)rand_r(&seed) % (hi - lo));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        struct sockaddr_in addr;
        memset(&addr, 0, sizeof(addr));
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(p);
        int ok = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
        close(fd);
        if (ok) {
            *port = p;
            return 0;
        }
    }
    return h_kernel_port(port);
}

int h_free_port(uint16_t *port)
{
    int rc = h_ctx_begin();
    if (rc != 0)
        return rc;
    if (h_ctx.n_port_claims == H_MAX_PORT_CLAIMS)
        return -ENOSPC;
    for (int attempt = 0; attempt < 1000; attempt++) {
        uint16_t p = 0;
        rc = h_candidate_port(&p);
        if (rc != 0)
            return rc;
        if (p == 0 || h_port_was_given(p))
            continue;
        int fd = h_claim_port(p);
        if (fd == -EADDRINUSE)
            continue;
        if (fd < 0)
            return fd;
        h_ports_given[p / 8] |= (uint8_t)(1u << (p % 8));
        h_ctx.port_claims[h_ctx.n_port_claims++] = fd;
        *port = p;
        return 0;
    }
    return -EADDRNOTAVAIL;
}

ssize_t h_fd_read_more(int fd, char *buf, size_t cap, size_t *len, int timeout_ms)
{
    if (*len + 1 >= cap)
        return -ENOBUFS;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc < 0)
        return -errno;
    if (rc == 0)
        return -ETIMEDOUT;
    ssize_t n = read(fd, buf + *len, cap - 1 - *len);
    if (n < 0)
        return -errno;
    *len += (size_t)n;
    buf[*len] = '\0';
    return n;
}

int h_shm_name(char *buf, size_t len)
{
    int rc = h_ctx_begin();
    if (rc != 0)
        return rc;
    /* Three names: the segment and the indexes the control plane creates
     * beside it ("<name>.prefix", "<name>.kvholders"), all removed at
     * teardown. */
    static const char *const suffixes[] = {"", ".prefix", ".kvholders"};
    if (h_ctx.n_shm + 3 > H_MAX_SHM)
        return -ENOSPC;
    char name[H_NAME_MAX];
    rc = h_fmt(name, sizeof(name), "/sy-test-%d-%u", (int)getpid(), ++h_shm_seq);
    if (rc == 0)
        rc = h_fmt(buf, len, "%s", name);
    if (rc != 0)
        return rc;
    for (int k = 0; k < 3; k++) {
        char full[H_NAME_MAX];
        rc = h_fmt(full, sizeof(full), "%s%s", name, suffixes[k]);
        if (rc != 0)
            return rc;
        size_t i = h_ctx.n_shm;
        memcpy(h_ctx.shm_names[i], full, sizeof(full));
        snprintf(h_ctx.shm_paths[i], sizeof(h_ctx.shm_paths[i]), "/dev/shm%s", full);
        h_ctx.n_shm = i + 1;
    }
    return 0;
}

int h_url(char *buf, size_t len, uint16_t port, const char *path)
{
    return h_fmt(buf, len, "http://127.0.0.1:%u%s", (unsigned)port, path != NULL ? path : "");
}

/* ---- config files ------------------------------------------------------- */

int h_write_file(const char *name, const char *text, char *path, size_t path_len)
{
    char full[H_PATH_MAX];
    int rc = h_tmp_path(name, full, sizeof(full));
    if (rc != 0)
        return rc;
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && path != NULL)
        rc = h_fmt(path, path_len, "%s", full);
    return rc;
}

/* A bounded text builder; overflow sticks and is reported once at the end. */
struct h_text {
    char *buf;
    size_t len;
    size_t cap;
    bool overflow;
};

static void h_text_add(struct h_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void h_text_add(struct h_text *t, const char *fmt, ...)
{
    if (t->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->cap - t->len) {
        t->overflow = true;
        return;
    }
    t->len += (size_t)n;
}

/* Adds each line of text with indent spaces in front. */
static void h_text_add_indented(struct h_text *t, const char *text, int indent)
{
    const char *line = text;
    while (*line != '\0') {
        const char *nl = strchr(line, '\n');
        int n = nl != NULL ? (int)(nl - line) : (int)strlen(line);
        if (n > 0)
            h_text_add(t, "%*s%.*s\n", indent, "", n, line);
        line += n;
        if (*line == '\n')
            line++;
    }
}

/* Adds key: "value" with YAML double-quote escaping. */
static void h_text_add_quoted(struct h_text *t, int indent, const char *key, const char *value)
{
    h_text_add(t, "%*s%s: \"", indent, "", key);
    for (const char *c = value; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            h_text_add(t, "\\%c", *c);
        else
            h_text_add(t, "%c", *c);
    }
    h_text_add(t, "\"\n");
}

static void h_copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

int h_config_add_worker(struct h_config *cfg, const char *url, const char *id, const char *model,
                        const char *role)
{
    if (cfg->n_workers == H_MAX_WORKERS)
        return -ENOSPC;
    if (url == NULL || strlen(url) >= H_URL_MAX)
        return -EINVAL;
    struct h_worker_spec *w = &cfg->workers[cfg->n_workers++];
    memset(w, 0, sizeof(*w));
    h_copy(w->url, sizeof(w->url), url);
    h_copy(w->id, sizeof(w->id), id);
    h_copy(w->model, sizeof(w->model), model);
    h_copy(w->role, sizeof(w->role), role);
    return 0;
}

static int h_config_fill(struct h_config *cfg)
{
    int rc = 0;
    if (cfg->shm_name[0] == '\0')
        rc = h_shm_name(cfg->shm_name, sizeof(cfg->shm_name));
    if (rc == 0 && cfg->admin_socket[0] == '\0')
        rc = h_tmp_path("admin.sock", cfg->admin_socket, sizeof(cfg->admin_socket));
    if (rc == 0 && strlen(cfg->admin_socket) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        rc = -ENAMETOOLONG;
    if (rc == 0 && cfg->admin_port == 0)
        rc = h_free_port(&cfg->admin_port);
    if (rc == 0 && cfg->dataplane_port == 0)
        rc = h_free_port(&cfg->dataplane_port);
    return rc;
}

int h_config_write(struct h_config *cfg, const char *name)
{
    int rc = h_config_fill(cfg);
    if (rc != 0)
        return rc;
    struct h_text t = {.buf = malloc(H_CONFIG_MAX), .cap = H_CONFIG_MAX};
    if (t.buf == NULL)
        return -ENOMEM;
    t.buf[0] = '\0';

    h_text_add(&t, "# written by the e2e harness\nshm:\n");
    h_text_add_quoted(&t, 2, "name", cfg->shm_name);
    if (cfg->shm_extra != NULL)
        h_text_add_indented(&t, cfg->shm_extra, 2);

    h_text_add(&t, "controlplane:\n  admin_listen: \"127.0.0.1:%u\"\n", (unsigned)cfg->admin_port);
    h_text_add_quoted(&t, 2, "admin_socket", cfg->admin_socket);
    if (cfg->health_interval != NULL || cfg->health_extra != NULL) {
        h_text_add(&t, "  health:\n");
        if (cfg->health_interval != NULL)
            h_text_add(&t, "    interval: %s\n", cfg->health_interval);
        if (cfg->health_extra != NULL)
            h_text_add_indented(&t, cfg->health_extra, 4);
    }
    if (cfg->controlplane_extra != NULL)
        h_text_add_indented(&t, cfg->controlplane_extra, 2);

    h_text_add(&t, "dataplane:\n  listen: \"127.0.0.1:%u\"\n", (unsigned)cfg->dataplane_port);
    if (cfg->dataplane_extra != NULL)
        h_text_add_indented(&t, cfg->dataplane_extra, 2);

    if (cfg->policy != NULL || cfg->policy_extra != NULL) {
        h_text_add(&t, "policy:\n");
        if (cfg->policy != NULL)
            h_text_add(&t, "  name: %s\n", cfg->policy);
        if (cfg->policy_extra != NULL)
            h_text_add_indented(&t, cfg->policy_extra, 2);
    }

    if (cfg->n_workers == 0)
        h_text_add(&t, "workers: []\n");
    else
        h_text_add(&t, "workers:\n");
    for (size_t i = 0; i < cfg->n_workers; i++) {
        const struct h_worker_spec *w = &cfg->workers[i];
        h_text_add_quoted(&t, 2, "- url", w->url);
        if (w->id[0] != '\0')
            h_text_add_quoted(&t, 4, "id", w->id);
        if (w->model[0] != '\0')
            h_text_add_quoted(&t, 4, "model", w->model);
        if (w->role[0] != '\0')
            h_text_add(&t, "    role: %s\n", w->role);
        if (w->extra != NULL)
            h_text_add_indented(&t, w->extra, 4);
    }
    if (cfg->extra_yaml != NULL)
        h_text_add_indented(&t, cfg->extra_yaml, 0);

    if (t.overflow)
        rc = -E2BIG;
    else
        rc = h_write_file(name != NULL ? name : "config.yaml", t.buf, cfg->path, sizeof(cfg->path));
    free(t.buf);
    return rc;
}

/* ---- processes ---------------------------------------------------------- */

int h_bin_path(const char *bin, char *buf, size_t len)
{
    const char *dir = getenv("SWITCHYARD_BUILD_DIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "build";
    return h_fmt(buf, len, "%s/%s", dir, bin);
}

/* Closes every fd from 3 up except keep (close-on-exec, closed by execv). */
static void h_child_close_fds(int keep)
{
    if (keep > 3)
        close_range(3, (unsigned)keep - 1, 0);
    if (close_range((unsigned)keep + 1, ~0u, 0) != 0) {
        for (int fd = keep + 1; fd < 4096; fd++)
            close(fd);
    }
}

/* In the child, before exec: async-signal-safe calls only. Never returns. */
static void h_child_exec(const char *path, const char *const argv[], int null_fd, int log_fd,
                         int err_fd, pid_t parent)
{
    int err = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto out_report;
    /* The parent may have died before prctl: then nobody would kill us. */
    if (getppid() != parent)
        _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Ignored signals survive exec; the daemons must see default SIGPIPE. */
    signal(SIGPIPE, SIG_DFL);
    if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(log_fd, STDOUT_FILENO) < 0 ||
        dup2(log_fd, STDERR_FILENO) < 0)
        goto out_report;
    h_child_close_fds(err_fd);
    execv(path, (char *const *)argv);
out_report:
    err = errno;
    ssize_t n = write(err_fd, &err, sizeof(err));
    (void)n;
    _exit(127);
}

int h_spawn(const char *name, const char *const argv[], struct h_proc **out)
{
    int rc = h_ctx_begin();
    if (rc != 0)
        return rc;
    if (h_ctx.n_procs == H_MAX_PROCS)
        return -ENOSPC;
    if (access(argv[0], X_OK) != 0) {
        rc = -errno;
        fprintf(stderr, "harness: cannot run %s: %s (SWITCHYARD_BUILD_DIR=%s)\n", argv[0],
                strerror(-rc),
                getenv("SWITCHYARD_BUILD_DIR") ? getenv("SWITCHYARD_BUILD_DIR") : "");
        return rc;
    }
    size_t idx = h_ctx.n_procs;
    struct h_proc *p = &h_ctx.procs[idx];
    memset(p, 0, sizeof(*p));
    h_copy(p->name, sizeof(p->name), name);
    char log_name[H_NAME_MAX + 16];
    rc = h_fmt(log_name, sizeof(log_name), "%s-%zu.log", name, idx);
    if (rc == 0)
        rc = h_tmp_path(log_name, p->log_path, sizeof(p->log_path));
    if (rc != 0)
        return rc;

    int log_fd = open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0)
        return -errno;
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
        rc = -errno;
        goto out_close_log;
    }
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        rc = -errno;
        goto out_close_null;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        goto out_close_pipe;
    }
    if (pid == 0)
        h_child_exec(argv[0], argv, null_fd, log_fd, err_pipe[1], parent);

    close(err_pipe[1]);
    err_pipe[1] = -1;
    p->pid = pid;
    /* Visible to teardown and the signal handler from here on. */
    h_ctx.n_procs = idx + 1;
    int child_err = 0;
    ssize_t n;
    do {
        n = read(err_pipe[0], &child_err, sizeof(child_err));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(child_err)) {
        /* exec failed: reap the child now, it is no test's business */
        waitpid(pid, &p->wait_status, 0);
        p->exited = true;
        p->expected = true;
        rc = -(child_err != 0 ? child_err : EIO);
        fprintf(stderr, "harness: exec %s failed: %s\n", argv[0], strerror(-rc));
    } else if (out != NULL) {
        *out = p;
    }
out_close_pipe:
    close(err_pipe[0]);
    if (err_pipe[1] >= 0)
        close(err_pipe[1]);
out_close_null:
    close(null_fd);
out_close_log:
    close(log_fd);
    return rc;
}

int h_start_mockworker(uint16_t port, const char *const extra[], struct h_proc **out)
{
    enum { MAX_ARGS = 64 };
    char bin[H_PATH_MAX];
    char listen[32];
    int rc = h_bin_path("switchyard-mockworker", bin, sizeof(bin));
    if (rc == 0)
        rc = h_fmt(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    if (rc != 0)
        return rc;
    const char *argv[MAX_ARGS + 1];
    size_t n = 0;
    argv[n++] = bin;
    argv[n++] = "--listen";
    argv[n++] = listen;
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (n == MAX_ARGS)
            return -E2BIG;
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    return h_spawn("mockworker", argv, out);
}

static int h_start_daemon(const char *name, const char *config_path, struct h_proc **out)
{
    char bin[H_PATH_MAX];
    char base[H_NAME_MAX];
    int rc = h_fmt(base, sizeof(base), "switchyard-%s", name);
    if (rc == 0)
        rc = h_bin_path(base, bin, sizeof(bin));
    if (rc != 0)
        return rc;
    const char *argv[] = {bin, "--config", config_path, NULL};
    return h_spawn(name, argv, out);
}

int h_start_controlplane(const char *config_path, struct h_proc **out)
{
    return h_start_daemon("controlplane", config_path, out);
}

int h_start_dataplane(const char *config_path, struct h_proc **out)
{
    return h_start_daemon("dataplane", config_path, out);
}

bool h_proc_is_running(struct h_proc *p)
{
    if (p->exited)
        return false;
    int status = 0;
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->wait_status = status;
        p->exited = true;
        return false;
    }
    return true;
}

int h_proc_signal(struct h_proc *p, int sig)
{
    p->expected = true;
    if (!h_proc_is_running(p))
        return -ESRCH;
    return kill(p->pid, sig) == 0 ? 0 : -errno;
}

static bool h_proc_exited_cond(void *arg)
{
    return !h_proc_is_running(arg);
}

int h_proc_wait(struct h_proc *p, int timeout_ms, int *wait_status)
{
    p->expected = true;
    int rc = h_wait_until(h_proc_exited_cond, p, timeout_ms);
    if (rc == 0 && wait_status != NULL)
        *wait_status = p->wait_status;
    return rc;
}

int h_proc_stop(struct h_proc *p, int timeout_ms)
{
    p->expected = true;
    if (!h_proc_is_running(p))
        return 0;
    kill(p->pid, SIGTERM);
    if (h_wait_until(h_proc_exited_cond, p, timeout_ms) == 0)
        return 0;
    kill(p->pid, SIGKILL);
    if (waitpid(p->pid, &p->wait_status, 0) == p->pid)
        p->exited = true;
    return -ETIMEDOUT;
}

bool h_proc_log_contains(const struct h_proc *p, const char *needle)
{
    FILE *f = fopen(p->log_path, "re");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

void h_proc_print_log(const struct h_proc *p, int max_lines)
{
    fflush(stdout);
    fprintf(stderr, "----- %s (pid %d) log tail: %s -----\n", p->name, (int)p->pid, p->log_path);
    int fd = open(p->log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "(cannot open: %s)\n", strerror(errno));
        return;
    }
    char *buf = malloc(H_LOG_TAIL_BYTES + 1);
    off_t size = lseek(fd, 0, SEEK_END);
    if (buf == NULL || size < 0)
        goto out_close;
    off_t start = size > H_LOG_TAIL_BYTES ? size - H_LOG_TAIL_BYTES : 0;
    ssize_t n = pread(fd, buf, (size_t)(size - start), start);
    if (n <= 0)
        goto out_close;
    buf[n] = '\0';
    /* Walk back max_lines newlines from the end (a trailing one not counted). */
    ssize_t i = n - 1;
    if (i >= 0 && buf[i] == '\n')
        i--;
    int lines = 0;
    for (; i >= 0; i--) {
        if (buf[i] == '\n' && ++lines == max_lines)
            break;
    }
    fprintf(stderr, "%s%s", buf + i + 1, (n > 0 && buf[n - 1] == '\n') ? "" : "\n");
out_close:
    fprintf(stderr, "----- end of %s log -----\n", p->name);
    free(buf);
    close(fd);
}

/* True when the log holds a sanitizer report. */
static bool h_log_has_sanitizer_report(const char *path)
{
    static const char *const markers[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                          "runtime error:", "WARNING: ThreadSanitizer"};
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++) {
            if (strstr(line, markers[i]) != NULL)
                found = true;
        }
    }
    fclose(f);
    return found;
}

/* Describes why p's end counts as a failure, or returns false. */
static bool h_proc_misbehaved(const struct h_proc *p, bool stopped_by_teardown, char *why,
                              size_t len)
{
    int st = p->wait_status;
    if (h_log_has_sanitizer_report(p->log_path)) {
        snprintf(why, len, "sanitizer report in its log");
        return true;
    }
    if (p->expected)
        return false;
    if (!stopped_by_teardown) {
        if (WIFSIGNALED(st))
            snprintf(why, len, "died of signal %d before teardown", WTERMSIG(st));
        else
            snprintf(why, len, "exited with status %d before teardown", WEXITSTATUS(st));
        return true;
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) != SIGTERM && WTERMSIG(st) != SIGKILL) {
        snprintf(why, len, "died of signal %d at shutdown", WTERMSIG(st));
        return true;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 128 + SIGTERM) {
        snprintf(why, len, "exited with status %d at shutdown", WEXITSTATUS(st));
        return true;
    }
    return false;
}

static bool h_all_exited_cond(void *arg)
{
    (void)arg;
    bool all = true;
    for (size_t i = 0; i < h_ctx.n_procs; i++) {
        if (h_proc_is_running(&h_ctx.procs[i]))
            all = false;
    }
    return all;
}

/* Stops every process: SIGTERM to all, one shared deadline, then SIGKILL. */
static void h_stop_all(void)
{
    for (size_t i = 0; i < h_ctx.n_procs; i++) {
        struct h_proc *p = &h_ctx.procs[i];
        if (h_proc_is_running(p)) {
            h_ctx.stopped_by_teardown[i] = true;
            kill(p->term_pid > 0 ? p->term_pid : p->pid, SIGTERM);
        }
    }
    if (h_wait_until(h_all_exited_cond, NULL, H_STOP_TIMEOUT_MS) == 0)
        return;
    for (size_t i = 0; i < h_ctx.n_procs; i++) {
        struct h_proc *p = &h_ctx.procs[i];
        if (!h_proc_is_running(p))
            continue;
        fprintf(stderr, "harness: %s (pid %d) ignored SIGTERM for %d ms; SIGKILL\n", p->name,
                (int)p->pid, H_STOP_TIMEOUT_MS);
        kill(p->pid, SIGKILL);
        if (waitpid(p->pid, &p->wait_status, 0) == p->pid)
            p->exited = true;
    }
}

static int h_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Ends the active context; idempotent. Returns -1 when a process misbehaved. */
static int h_teardown_ctx(void)
{
    if (!h_ctx.active)
        return 0;
    h_async_destroy_all();
    h_load_stop_all();
    h_stop_all();

    int rc = 0;
    for (size_t i = 0; i < h_ctx.n_procs; i++) {
        char why[128];
        const struct h_proc *p = &h_ctx.procs[i];
        if (h_proc_misbehaved(p, h_ctx.stopped_by_teardown[i], why, sizeof(why))) {
            fprintf(stderr, "harness: %s (pid %d): %s\n", p->name, (int)p->pid, why);
            rc = -1;
        }
    }
    bool test_failed = h_ctx.have_def && !h_ctx.test_returned;
    if (rc != 0 || test_failed || h_env_is_set("SWITCHYARD_TEST_LOGS")) {
        for (size_t i = 0; i < h_ctx.n_procs; i++)
            h_proc_print_log(&h_ctx.procs[i], H_LOG_TAIL_LINES);
    }

    h_ctx_in_signal_view = 0;
    for (size_t i = 0; i < h_ctx.n_shm; i++) {
        shm_unlink(h_ctx.shm_names[i]);
        /* The data planes' rate-limit and queue-depth object beside it. */
        char rl[H_NAME_MAX + 16];
        snprintf(rl, sizeof(rl), "%s-ratelimit", h_ctx.shm_names[i]);
        shm_unlink(rl);
        /* The data planes' response table beside it (shm/responses.h). */
        char beside[H_NAME_MAX + 16];
        snprintf(beside, sizeof(beside), "%s.responses", h_ctx.shm_names[i]);
        shm_unlink(beside);
    }
    for (size_t i = 0; i < h_ctx.n_port_claims; i++)
        close(h_ctx.port_claims[i]);
    if ((test_failed || rc != 0) && h_env_is_set("SWITCHYARD_KEEP_TMP"))
        fprintf(stderr, "harness: kept %s\n", h_ctx.tmpdir);
    else
        nftw(h_ctx.tmpdir, h_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    memset(&h_ctx, 0, sizeof(h_ctx));
    return rc;
}

/* ---- waiting ------------------------------------------------------------ */

int h_wait_until(h_cond_fn cond, void *arg, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    for (;;) {
        if (cond(arg))
            return 0;
        int64_t left = deadline - h_now_ms();
        if (left <= 0)
            return cond(arg) ? 0 : -ETIMEDOUT;
        h_sleep_ms(left < H_POLL_MS ? (int)left : H_POLL_MS);
    }
}

void h_sha256_hex(const char *text, char out[65])
{
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(text), (const uint8_t *)text);
    sha256_digest(&ctx, sizeof(digest), digest);
    for (size_t i = 0; i < sizeof(digest); i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
}
