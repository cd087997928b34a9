/*
 * A forked lease holder for end-to-end tests: a child process that behaves
 * like a dataplane as far as the segment and the admin channel see it
 * (claims a lease, holds load guards, beats, optionally answers in-flight
 * questions), so tests can hold exact load, kill it, or make it hang
 * without a real forwarding dataplane. Start from the test's main thread;
 * the child dies with the test binary (PR_SET_PDEATHSIG).
 * Functions assert (cmocka).
 */
#ifndef SY_TESTS_E2E_HARNESS_HOLDER_H
#define SY_TESTS_E2E_HARNESS_HOLDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct h_holder_load {
    uint32_t slot;
    uint32_t generation;
    int guards;
};

/*
 * What a child does: claim a lease, take `guards` guards on (slot, gen)
 * (and those listed in `more`),
 * optionally connect to the admin channel answering `answer` to in-flight
 * questions, report "ready" (the lease index) and serve commands:
 *   'q' release everything and exit 0
 *   'x' close the channel and stop heartbeating (keep the lock), keep running
 */
struct h_holder_spec {
    const char *shm;
    const char *socket; /* NULL = no admin channel */
    uint32_t slot;      /* `guards` guards on (slot, generation) ... */
    uint32_t generation;
    int guards;
    const struct h_holder_load *more; /* ... and these on other workers */
    size_t n_more;
    uint64_t answer;
    bool leak; /* on 'q', abandon the guards instead of releasing them (drift) */
};

struct h_holder {
    pid_t pid;
    int ready_rd;
    int cmd_wr;
    uint32_t lease;
};

/* Forks the holder and waits until it holds its load (and, with a socket,
 * is connected). h->lease is its lease index. */
void h_holder_start(struct h_holder *h, const struct h_holder_spec *s);
/* Sends a command byte ('q' or 'x', see above). */
void h_holder_command(struct h_holder *h, char c);
/* 'q', then waits for a clean exit. */
void h_holder_finish(struct h_holder *h);
/* SIGKILL and reap. */
void h_holder_kill(struct h_holder *h);

#endif
