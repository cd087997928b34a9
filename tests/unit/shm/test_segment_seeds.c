/*
 * The segment fuzz target's seeds (tests/fuzz/corpus/segment/) must include
 * segments this build accepts: a layout version bump that leaves them
 * behind turns the target into a fuzzer of the refusal path alone (it
 * happened once: 10 million executions reached 23 edges instead of 74).
 * fresh_4x2 is a segment written by a control plane (4 worker slots, 2
 * data planes); regenerate it when SHM_LAYOUT_VERSION changes, and bump the
 * version field of the other seeds (docs/reliability.md says how).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "shm/segment.h"

#define SEED_DIR "tests/fuzz/corpus/segment"

/* Whether the file at path is a segment shm_segment_validate accepts. */
static bool seed_validates(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t hdr_size = shm_segment_size_for(0, 0);
    uint8_t *bytes = aligned_alloc(64, (hdr_size + 63) / 64 * 64);
    assert_non_null(bytes);
    memset(bytes, 0, hdr_size);
    size_t n = fread(bytes, 1, hdr_size, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    char err[256];
    bool ok = n == hdr_size &&
              shm_segment_validate((const void *)bytes, (uint64_t)size, err, sizeof(err)) == 0;
    free(bytes);
    return ok;
}

static void test_fresh_seed_is_a_valid_segment(void **state)
{
    (void)state;
    assert_true(seed_validates(SEED_DIR "/fresh_4x2"));
}

static void test_most_whole_segment_seeds_validate(void **state)
{
    (void)state;
    DIR *d = opendir(SEED_DIR);
    assert_non_null(d);
    size_t full = 0, valid = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", SEED_DIR, e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        if ((size_t)size < shm_segment_size_for(0, 0))
            continue; /* a fragment: a seed of the refusal path */
        full++;
        if (seed_validates(path))
            valid++;
    }
    closedir(d);
    /* Some whole segments among the seeds are refused on purpose (a size
     * or an offset out of bounds); most must be accepted, or the target
     * never gets past the header. */
    fprintf(stderr, "%zu of %zu whole-segment seeds validate\n", valid, full);
    assert_true(full > 0);
    assert_true(valid * 2 >= full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_seed_is_a_valid_segment),
        cmocka_unit_test(test_most_whole_segment_seeds_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
