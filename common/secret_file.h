/*
 * The one rule for a file that holds a secret (the admin token, the
 * workers' API key, the TLS private key): other users may not read it.
 * "Other users" are everyone outside the file's owner and the daemon's
 * own group: a file with any bit for other is refused, and one with group
 * bits only when its group is not the daemon's effective group. The group
 * exception is how Kubernetes projects a Secret for a non-root container
 * (owner root, group fsGroup, defaultMode 0440) and how a package ships a
 * key 0640 root:switchyard.
 *
 * The check is on a struct stat the caller took (fstat of the descriptor
 * it then reads, where it can), so it needs no I/O of its own and is safe
 * from any thread.
 */
#ifndef SY_COMMON_SECRET_FILE_H
#define SY_COMMON_SECRET_FILE_H

#include <stddef.h>
#include <sys/stat.h>

/* 0 when st keeps the file from other users (above). Else -EPERM, and
 * why (may be NULL) gets "open to other users (mode 0644, group 1000):
 * make it 0600 or 0400, or 0440 with the daemon's own group", for the
 * caller to put after the key and path. */
int secret_file_check(const struct stat *st, char *why, size_t why_len);

#endif
