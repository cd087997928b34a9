/*
 * The regression side of fuzzing: runs one fuzz target over its seed
 * corpus (tests/fuzz/corpus/NAME/) and every input that once crashed it
 * (tests/fuzz/regress/NAME/), as a cmocka test in the normal suite, built
 * by the normal compiler with or without sanitizers. libFuzzer is not
 * needed to replay: the target is a plain function.
 *
 * The binary is replay_fuzz_NAME; NAME picks the folders. Run from the
 * repository's root, as make check does.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static char target[64];

/* Feeds every regular file of dir to the target; returns how many. */
static size_t replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            if (len == cap) {
                cap = cap ? cap * 2 : 4096;
                uint8_t *nb = realloc(buf, cap);
                assert_non_null(nb);
                buf = nb;
            }
            size_t got = fread(buf + len, 1, cap - len, f);
            if (got == 0)
                break;
            len += got;
        }
        fclose(f);
        /* An exact-size copy, so ASan sees a read past the input's end. */
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        free(buf);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        n++;
    }
    closedir(d);
    return n;
}

static void test_replay_corpus_and_regressions(void **state)
{
    (void)state;
    char dir[256];
    snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", target);
    size_t seeds = replay_dir(dir);
    snprintf(dir, sizeof(dir), "tests/fuzz/regress/%s", target);
    size_t crashes = replay_dir(dir);
    print_message("%s: %zu seeds, %zu regression inputs\n", target, seeds, crashes);
    assert_true(seeds > 0); /* a target without seeds is a mistake in the tree */
}

int main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');
    base = base != NULL ? base + 1 : argv[0];
    const char *prefix = "replay_fuzz_";
    if (strncmp(base, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "%s: expected to be named replay_fuzz_NAME\n", base);
        return 2;
    }
    snprintf(target, sizeof(target), "%s", base + strlen(prefix));
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_corpus_and_regressions),
    };
    return cmocka_run_group_tests_name(target, tests, NULL, NULL);
}
