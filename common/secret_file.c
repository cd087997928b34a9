/*
 * Whether a secret's file is closed to other users (see secret_file.h).
 */
#include "common/secret_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

int secret_file_check(const struct stat *st, char *why, size_t why_len)
{
    bool group_ok = (st->st_mode & 0070) == 0 || st->st_gid == getegid();
    if ((st->st_mode & 0007) == 0 && group_ok)
        return 0;
    if (why != NULL && why_len > 0)
        snprintf(why, why_len,
                 "open to other users (mode %04o, group %u): make it 0600 or 0400, or 0440 with "
                 "the daemon's own group",
                 (unsigned)(st->st_mode & 07777), (unsigned)st->st_gid);
    return -EPERM;
}
