/*
 * Fuzz target: attaching a registry segment someone else wrote. A process
 * on the same host may create or scribble on the segment a data plane
 * attaches (docs/security.md), so attach must validate every size and
 * offset before using them. The input becomes the segment's bytes (padded
 * to at least a header); attach must refuse it or map it, and reading the
 * registry through a mapped segment must stay in bounds.
 *
 * Speed: attach is an object open, the header's validation and a mapping.
 * The validation, where every input-dependent branch is, runs on a private
 * copy of the header first; the shared-memory object (one per process,
 * created once, resized and rewritten per input) is attached only for a
 * header that passed, whose registry is then read, and for the first
 * input of each kind of refusal, so attach's own refusal path stays
 * covered. Oracle: attach agrees with the validation on every input it
 * sees. A run that crashed leaves its object; the next run removes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "shm/registry.h"
#include "shm/segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_PAD 1024u /* short inputs are zero-padded to this, like an object being sized */

static char seg_name[64];
static int seg_fd = -1;
static size_t hdr_size;
static _Alignas(64) uint8_t hdr_copy[FUZZ_PAD]; /* aligned as a mapping is (and the header wants) */
static uint8_t padded[FUZZ_PAD];
static bool refusal_seen[2]; /* -EAGAIN, -EPROTO: attach tried once each */

static void seg_remove(void)
{
    shm_unlink(seg_name);
}

/* A run that crashed (abort, no atexit) left its object behind: remove
 * those whose process is gone. */
static void remove_stale(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return;
    static const char prefix[] = "switchyard-fuzz-seg-";
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, sizeof(prefix) - 1) != 0)
            continue;
        long pid = strtol(e->d_name + sizeof(prefix) - 1, NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            char name[300];
            snprintf(name, sizeof(name), "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    hdr_size = shm_segment_size_for(0, 0); /* no slots, leases or lines: the header alone */
    if (hdr_size > FUZZ_PAD)
        abort();
    remove_stale();
    snprintf(seg_name, sizeof(seg_name), "/switchyard-fuzz-seg-%d", (int)getpid());
    seg_fd = shm_open(seg_name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (seg_fd < 0) {
        perror("fuzz_segment: shm_open");
        abort();
    }
    atexit(seg_remove);
    return 0;
}

/* The input as the object's bytes, then attach; its result. */
static int attach_input(const uint8_t *data, size_t size, size_t len)
{
    const void *bytes = data;
    if (size < FUZZ_PAD) {
        memset(padded, 0, sizeof(padded));
        memcpy(padded, data, size);
        bytes = padded;
    }
    if (ftruncate(seg_fd, (off_t)len) != 0 || pwrite(seg_fd, bytes, len, 0) != (ssize_t)len)
        abort();
    struct shm_segment seg;
    char err[256];
    int rc = shm_segment_attach(&seg, seg_name, err, sizeof(err));
    if (rc == 0) {
        struct shm_worker_info info[8];
        (void)shm_registry_snapshot(&seg, info, 8);
        struct shm_segment_stats st;
        shm_segment_stats(&seg, &st);
        shm_segment_close(&seg);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    size_t len = size < FUZZ_PAD ? FUZZ_PAD : size;
    memset(hdr_copy, 0, hdr_size);
    memcpy(hdr_copy, data, size < hdr_size ? size : hdr_size);
    char err[256];
    int vrc = shm_segment_validate((const struct shm_header *)hdr_copy, len, err, sizeof(err));
    int kind = vrc == -EAGAIN ? 0 : 1;
    if (vrc == 0 || !refusal_seen[kind]) {
        if (vrc != 0)
            refusal_seen[kind] = true;
        if (attach_input(data, size, len) != vrc)
            abort(); /* attach and the validation disagree */
    }
    return 0;
}
