/*
 * Fuzz target: the YAML config loader (libyaml events, the schema's
 * per-key parsers and the cross-key checks). Whatever the bytes, the loader
 * must either fill a config or refuse with a message; the error text must
 * be a NUL-terminated string within its buffer.
 *
 * Speed: writing the schema's defaults is most of the cost of a short
 * input, and the loader writes them itself (cfg_load_string starts with
 * cfg_init_defaults, and a refusal ends with cfg_fini): the target adds
 * only the cfg_fini that frees an accepted config.
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
    int rc = cfg_load_string(&cfg, "fuzz.yaml", (const char *)data, size, err, sizeof(err));
    if (rc != 0 && memchr(err, '\0', sizeof(err)) == NULL)
        abort(); /* an unterminated error message */
    if (rc == 0)
        cfg_fini(&cfg);
    return 0;
}
