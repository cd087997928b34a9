/*
 * What a client's header must look like before the data plane forwards it
 * (RFC 9110 section 5). libmicrohttpd 0.9.75 is lenient: it accepts a bare
 * CR inside a value, other control bytes, and white space between a name
 * and its colon, and hands such headers over as they came. Forwarded
 * verbatim they let a client smuggle a header past the hop-by-hop filter
 * ("Transfer-Encoding : chunked", "Content-Length\t: 5") or inject one
 * ("X-A: foo\rX-Injected: 1"). So a name must be a token and a value must
 * hold no control byte but HTAB; the listener answers 400 otherwise.
 *
 * Headers named by the client's Connection header are hop-by-hop too (RFC
 * 9110 section 7.6.1) and are not forwarded.
 *
 * Pure functions over caller memory; any thread.
 */
#ifndef SY_DATAPLANE_HEADER_RULES_H
#define SY_DATAPLANE_HEADER_RULES_H

#include <stdbool.h>
#include <stddef.h>

/* True when name[0..len) is a non-empty RFC 9110 token (1*tchar). */
bool dp_hdr_name_is_token(const char *name, size_t len);

/* True when value[0..len) holds no CR, LF, NUL or other control byte (HTAB
 * and bytes from 0x80 up are allowed, as obs-text). */
bool dp_hdr_value_is_clean(const char *value, size_t len);

/* True when connection_value (a Connection header's value: tokens separated
 * by commas and optional white space) lists name[0..len), compared without
 * regard to case. */
bool dp_hdr_connection_lists(const char *connection_value, const char *name, size_t len);

#endif
