/*
 * The names of the worker source kinds (see source.h): one table, used in
 * log lines and error messages.
 */
#include "controlplane/source.h"

static const char *const cp_source_names[CP_SOURCE_COUNT] = {
    [CP_SOURCE_STATIC] = "static config",
    [CP_SOURCE_API] = "admin API",
};

const char *cp_source_name(unsigned kind)
{
    return kind < CP_SOURCE_COUNT ? cp_source_names[kind] : "unknown source";
}
