/*
 * The names of the worker source kinds (see source.h): one table, used in
 * log lines and error messages.
 */
#include "controlplane/sources/source.h"

static const char *const cp_source_names[CP_SOURCE_COUNT] = {
    [CP_SOURCE_STATIC] = "static config",
    [CP_SOURCE_API] = "admin API",
    [CP_SOURCE_KUBERNETES] = "Kubernetes discovery",
};

static const char *const cp_source_keys[CP_SOURCE_COUNT] = {
    [CP_SOURCE_STATIC] = "static",
    [CP_SOURCE_API] = "api",
    [CP_SOURCE_KUBERNETES] = "kubernetes",
};

const char *cp_source_name(unsigned kind)
{
    return kind < CP_SOURCE_COUNT ? cp_source_names[kind] : "unknown source";
}

const char *cp_source_key(unsigned kind)
{
    return kind < CP_SOURCE_COUNT ? cp_source_keys[kind] : "unknown";
}
