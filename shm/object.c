/*
 * Creating and opening the node's shared-memory objects (see object.h).
 */
#include "shm/object.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static struct flock shm_object_range(short type, uint64_t off, uint64_t len)
{
    struct flock fl = {
        .l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)off, .l_len = (off_t)len};
    return fl;
}

int shm_object_lock(int fd, uint64_t off, uint64_t len)
{
    struct flock fl = shm_object_range(F_WRLCK, off, len);
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0)
        return (errno == EAGAIN || errno == EACCES) ? -EBUSY : -errno;
    return 0;
}

int shm_object_unlock(int fd, uint64_t off, uint64_t len)
{
    struct flock fl = shm_object_range(F_UNLCK, off, len);
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

bool shm_object_locked_by_other(int fd, uint64_t off, uint64_t len)
{
    /* F_OFD_GETLK reports a conflicting lock of another open file
     * description; our own never conflicts with us. */
    struct flock fl = shm_object_range(F_WRLCK, off, len);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return true;
    return fl.l_type != F_UNLCK;
}

int shm_object_check_owner(int fd, const char *name, const char *what, char *err, size_t err_len)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(err, err_len, "fstat(%s): %s", name, strerror(e));
        return -e;
    }
    if (st.st_uid == geteuid() && (st.st_mode & 0077) == 0)
        return 0;
    snprintf(err, err_len,
             "%s %s is owned by uid %u with mode %04o; refusing it: it must belong to this user "
             "(uid %u) and be closed to group and other (0600). Remove it (after checking who "
             "made it) or set another shm.name",
             what, name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
    return -EPERM;
}

int shm_object_create(const char *name, const char *what, size_t size, uint64_t lock_off,
                      uint64_t lock_len, struct shm_object *out, char *err, size_t err_len)
{
    *out = (struct shm_object){.fd = -1};
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        if (e != EEXIST)
            snprintf(err, err_len, "creating %s %s: %s", what, name, strerror(e));
        return -e;
    }
    int rc = 0;
    /* Locked before it is sized: an opener must not take the empty object
     * for a dead creator's leftovers. */
    if (lock_len > 0 && (rc = shm_object_lock(fd, lock_off, lock_len)) != 0) {
        snprintf(err, err_len, "locking new %s %s: %s", what, name, strerror(-rc));
        goto out_unlink;
    }
    /* The umask may have narrowed the mode at creation; 0600 exactly. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0) {
        rc = -errno;
        snprintf(err, err_len, "sizing %s %s to %zu bytes: %s", what, name, size, strerror(-rc));
        goto out_unlink;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        snprintf(err, err_len, "mmap of %s %s: %s", what, name, strerror(-rc));
        goto out_unlink;
    }
    *out = (struct shm_object){.fd = fd, .base = base, .size = size};
    return 0;

out_unlink:
    shm_unlink(name);
    close(fd);
    return rc;
}

int shm_object_open(const char *name, const char *what, size_t min_size, struct shm_object *out,
                    char *err, size_t err_len)
{
    *out = (struct shm_object){.fd = -1};
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_len, "opening %s %s: %s", what, name, strerror(e));
        return -e;
    }
    int rc = shm_object_check_owner(fd, name, what, err, err_len);
    if (rc != 0)
        goto out_close;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, err_len, "fstat(%s): %s", name, strerror(-rc));
        goto out_close;
    }
    if ((uint64_t)st.st_size < min_size) {
        snprintf(err, err_len, "%s %s is not sized yet", what, name);
        rc = -ENODATA;
        goto out_close;
    }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        snprintf(err, err_len, "mmap of %s %s: %s", what, name, strerror(-rc));
        goto out_close;
    }
    *out = (struct shm_object){.fd = fd, .base = base, .size = (size_t)st.st_size};
    return 0;

out_close:
    close(fd);
    return rc;
}

void shm_object_unmap(struct shm_object *o)
{
    if (o->base != NULL)
        munmap(o->base, o->size);
    if (o->fd >= 0)
        close(o->fd);
    *o = (struct shm_object){.fd = -1};
}

int shm_object_map_checked(int fd, const char *name, const char *what, size_t header_bytes,
                           shm_object_validate_fn validate, void **base, size_t *size, char *err,
                           size_t err_len)
{
    int rc = shm_object_check_owner(fd, name, what, err, err_len);
    if (rc != 0)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, err_len, "fstat(%s): %s", name, strerror(-rc));
        return rc;
    }
    if ((uint64_t)st.st_size < header_bytes) {
        snprintf(err, err_len, "%s %s is not sized yet (%lld bytes)", what, name,
                 (long long)st.st_size);
        return -EAGAIN;
    }
    void *head = mmap(NULL, header_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (head == MAP_FAILED) {
        rc = -errno;
        snprintf(err, err_len, "mmap of %s: %s", name, strerror(-rc));
        return rc;
    }
    rc = validate(head, (uint64_t)st.st_size, err, err_len);
    munmap(head, header_bytes);
    if (rc != 0)
        return rc;
    size_t len = (size_t)st.st_size;
    void *all = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (all == MAP_FAILED) {
        rc = -errno;
        snprintf(err, err_len, "mmap of %s: %s", name, strerror(-rc));
        return rc;
    }
    rc = validate(all, (uint64_t)len, err, err_len);
    if (rc != 0) {
        munmap(all, len);
        return rc;
    }
    *base = all;
    *size = len;
    return 0;
}

int shm_object_attach_checked(const char *name, const char *what, size_t header_bytes,
                              shm_object_validate_fn validate, void **base, size_t *size, char *err,
                              size_t err_len)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_len, "shm_open(%s): %s", name, strerror(e));
        return -e;
    }
    int rc =
        shm_object_map_checked(fd, name, what, header_bytes, validate, base, size, err, err_len);
    close(fd);
    return rc;
}

int shm_object_suffixed_name(const char *shm_name, const char *suffix, char *out, size_t len)
{
    int n = snprintf(out, len, "%s%s", shm_name, suffix);
    /* The object is /dev/shm/<name without its '/'>: NAME_MAX applies. */
    if (n < 0 || (size_t)n >= len || (size_t)n - 1 > NAME_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* One round's creation: the object is new, sized, zero-filled and given its
 * header; its descriptor is closed (the mapping keeps the object). */
static int rebuildable_create(const char *name, const struct shm_rebuildable *r, void **base,
                              char *err, size_t err_len)
{
    struct shm_object o;
    int rc = shm_object_create(name, r->what, r->size, 0, 0, &o, err, err_len);
    if (rc != 0)
        return rc; /* -EEXIST without a message: the caller opens it */
    r->init(o.base, r->size, r->arg);
    *base = o.base;
    close(o.fd);
    return 0;
}

int shm_object_open_rebuildable(const char *name, const struct shm_rebuildable *r, void **base,
                                size_t *size, enum shm_rebuildable_outcome *outcome, char *err,
                                size_t err_len)
{
    char why[256] = "";
    bool replaced = false;
    for (int attempt = 0; attempt < 4; attempt++) {
        int rc = rebuildable_create(name, r, base, err, err_len);
        if (rc == 0) {
            *size = r->size;
            *outcome = replaced ? SHM_REBUILDABLE_REPLACED : SHM_REBUILDABLE_CREATED;
            if (replaced)
                snprintf(err, err_len, "%s", why);
            return 0;
        }
        if (rc != -EEXIST)
            return rc;
        int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT)
                continue; /* removed meanwhile: create again */
            rc = -errno;
            snprintf(err, err_len, "shm_open(%s): %s", name, strerror(-rc));
            return rc;
        }
        void *old;
        size_t old_size;
        rc = shm_object_map_checked(fd, name, r->what, r->header_bytes, r->validate, &old,
                                    &old_size, err, err_len);
        close(fd);
        if (rc == 0) {
            if (r->adopt != NULL)
                r->adopt(old, old_size, r->arg);
            if (old_size == r->size) {
                *base = old;
                *size = old_size;
                *outcome = SHM_REBUILDABLE_REATTACHED;
                return 0;
            }
            snprintf(why, sizeof(why), "replaced %s %s of %zu bytes by one of %zu bytes", r->what,
                     name, old_size, r->size);
            munmap(old, old_size);
        } else if (rc == -EAGAIN || rc == -EPROTO) {
            /* Ours (the owner check passed) but unusable: a creator that
             * died half-way, or another version's. Rebuildable: start over. */
            snprintf(why, sizeof(why), "replaced an unusable %s: %.200s", r->what, err);
        } else {
            return rc;
        }
        shm_unlink(name);
        replaced = true;
    }
    snprintf(err, err_len, "%s %s keeps appearing and vanishing; giving up", r->what, name);
    return -EAGAIN;
}
