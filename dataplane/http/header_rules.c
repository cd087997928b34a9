/*
 * Header syntax checks for client requests (see header_rules.h for why).
 */
#include "dataplane/http/header_rules.h"

#include <strings.h>

/* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
 *         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static bool hdr_is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
        return true;
    default:
        return false;
    }
}

bool dp_hdr_name_is_token(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!hdr_is_tchar((unsigned char)name[i]))
            return false;
    return true;
}

bool dp_hdr_value_is_clean(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static bool hdr_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

bool dp_hdr_connection_lists(const char *connection_value, const char *name, size_t len)
{
    const char *p = connection_value;
    while (*p != '\0') {
        while (hdr_is_ows(*p) || *p == ',')
            p++;
        const char *start = p;
        while (*p != '\0' && *p != ',')
            p++;
        const char *end = p;
        while (end > start && hdr_is_ows(end[-1]))
            end--;
        if ((size_t)(end - start) == len && len > 0 && strncasecmp(start, name, len) == 0)
            return true;
    }
    return false;
}
