/*
 * Fuzz target: the YAML config loader (libyaml events, the schema's
 * per-key parsers and the cross-key checks). Whatever the bytes, the loader
 * must either fill a config or refuse with a message; the error text must
 * be a NUL-terminated string within its buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cfg cfg;
    char err[512];
    memset(err, 'x', sizeof(err));
    cfg_init_defaults(&cfg);
    int rc = cfg_load_string(&cfg, "fuzz.yaml", (const char *)data, size, err, sizeof(err));
    if (rc != 0 && memchr(err, '\0', sizeof(err)) == NULL)
        abort(); /* an unterminated error message */
    cfg_fini(&cfg);
    return 0;
}
