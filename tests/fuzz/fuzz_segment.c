/*
 * Fuzz target: attaching a registry segment someone else wrote. A process
 * on the same host may create or scribble on the segment a data plane
 * attaches (docs/security.md), so attach must validate every size and
 * offset before using them. The input becomes the segment's bytes (padded
 * to at least a header); attach must refuse it or map it, and reading the
 * registry through a mapped segment must stay in bounds.
 */
#include <fcntl.h>
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

static char seg_name[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    snprintf(seg_name, sizeof(seg_name), "/switchyard-fuzz-seg-%d", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    int fd = shm_open(seg_name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 0;
    /* Short inputs are zero-padded past a header, like an object being sized. */
    size_t len = size < 1024 ? 1024 : size;
    if (ftruncate(fd, (off_t)len) == 0 && (size == 0 || write(fd, data, size) == (ssize_t)size)) {
        struct shm_segment seg;
        char err[256];
        int arc = shm_segment_attach(&seg, seg_name, err, sizeof(err));
        if (arc == 0) {
            struct shm_worker_info info[8];
            (void)shm_registry_snapshot(&seg, info, 8);
            struct shm_segment_stats st;
            shm_segment_stats(&seg, &st);
            shm_segment_close(&seg);
        }
    }
    close(fd);
    shm_unlink(seg_name);
    return 0;
}
