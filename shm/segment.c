/*
 * Segment lifecycle (see segment.h). The order of creation matters: size the
 * object, zero it, write the geometry, and publish the magic last with a
 * release store, so a reader that sees the magic sees a complete header.
 * Everything that can be wrong with an existing object is checked against
 * fstat before the caller touches a single slot.
 */
#include "shm/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/proc.h"
#include "shm/layout_private.h"
#include "shm/object.h"

/* The owner lock covers the magic word. */
#define SHM_OWNER_LOCK_OFFSET 0u
#define SHM_OWNER_LOCK_LEN    8u

static uint32_t shm_lines_per_worker(uint32_t max_dataplanes)
{
    return (max_dataplanes + SHM_LEASES_PER_LINE - 1) / SHM_LEASES_PER_LINE;
}

size_t shm_segment_size_for(uint32_t max_workers, uint32_t max_dataplanes)
{
    return sizeof(struct shm_header) + (size_t)max_workers * sizeof(struct shm_worker_slot) +
           (size_t)max_dataplanes * sizeof(struct shm_lease) +
           (size_t)max_workers * shm_lines_per_worker(max_dataplanes) *
               sizeof(struct shm_load_line);
}

static void shm_segment_bind(struct shm_segment *seg, void *base, size_t size)
{
    seg->base = base;
    seg->size = size;
    seg->hdr = base;
    seg->max_workers = seg->hdr->max_workers;
    seg->max_dataplanes = seg->hdr->max_dataplanes;
    seg->lines_per_worker = seg->hdr->lines_per_worker;
    seg->slots = (struct shm_worker_slot *)((char *)base + seg->hdr->slots_offset);
    seg->leases = (struct shm_lease *)((char *)base + seg->hdr->leases_offset);
    seg->loads = (struct shm_load_line *)((char *)base + seg->hdr->loads_offset);
}

static void shm_segment_reset(struct shm_segment *seg)
{
    memset(seg, 0, sizeof(*seg));
    seg->fd = -1;
}

int shm_segment_validate(const struct shm_header *hdr, uint64_t file_size, char *err,
                         size_t err_len)
{
    uint64_t magic = atomic_load_explicit(&hdr->magic, memory_order_acquire);
    if (magic != SHM_MAGIC) {
        snprintf(err, err_len, "segment is not published yet (magic %#llx)",
                 (unsigned long long)magic);
        return -EAGAIN;
    }
    if (hdr->layout_version != SHM_LAYOUT_VERSION) {
        snprintf(err, err_len,
                 "segment has layout version %u, this binary uses layout version %u: stop every "
                 "switchyard process using it (or remove it) before starting this version",
                 hdr->layout_version, SHM_LAYOUT_VERSION);
        return -EPROTO;
    }
    if (hdr->header_size != sizeof(struct shm_header) ||
        hdr->slot_size != sizeof(struct shm_worker_slot) ||
        hdr->lease_size != sizeof(struct shm_lease) ||
        hdr->load_line_size != sizeof(struct shm_load_line)) {
        snprintf(err, err_len,
                 "segment record sizes (header %u, slot %u, lease %u, line %u) differ from this "
                 "binary's (%zu, %zu, %zu, %zu) under the same layout version %u",
                 hdr->header_size, hdr->slot_size, hdr->lease_size, hdr->load_line_size,
                 sizeof(struct shm_header), sizeof(struct shm_worker_slot),
                 sizeof(struct shm_lease), sizeof(struct shm_load_line), SHM_LAYOUT_VERSION);
        return -EPROTO;
    }
    if (hdr->max_workers == 0 || hdr->max_dataplanes == 0 ||
        hdr->max_dataplanes > SHM_MAX_DATAPLANES_LIMIT ||
        hdr->lines_per_worker != shm_lines_per_worker(hdr->max_dataplanes)) {
        snprintf(err, err_len, "segment capacities are invalid (max_workers %u, max_dataplanes %u)",
                 hdr->max_workers, hdr->max_dataplanes);
        return -EPROTO;
    }
    size_t expect = shm_segment_size_for(hdr->max_workers, hdr->max_dataplanes);
    if (hdr->total_size != expect || file_size != expect) {
        snprintf(err, err_len,
                 "segment size mismatch: header says %llu bytes, object has %llu, capacities "
                 "imply %zu",
                 (unsigned long long)hdr->total_size, (unsigned long long)file_size, expect);
        return -EPROTO;
    }
    uint64_t slots = sizeof(struct shm_header);
    uint64_t leases = slots + (uint64_t)hdr->max_workers * sizeof(struct shm_worker_slot);
    uint64_t loads = leases + (uint64_t)hdr->max_dataplanes * sizeof(struct shm_lease);
    if (hdr->slots_offset != slots || hdr->leases_offset != leases || hdr->loads_offset != loads) {
        snprintf(err, err_len, "segment region offsets are inconsistent");
        return -EPROTO;
    }
    return 0;
}

int shm_segment_try_lock(const struct shm_segment *seg, uint64_t offset, uint64_t len)
{
    return shm_object_lock(seg->fd, offset, len);
}

int shm_segment_unlock(const struct shm_segment *seg, uint64_t offset, uint64_t len)
{
    return shm_object_unlock(seg->fd, offset, len);
}

bool shm_segment_is_locked_by_other(const struct shm_segment *seg, uint64_t offset, uint64_t len)
{
    /* On error assume held: a false "dead" would reap live load. */
    return shm_object_locked_by_other(seg->fd, offset, len);
}

static int shm_map(int fd, size_t size, void **out)
{
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return -errno;
    *out = base;
    return 0;
}

static void shm_fill_owner(struct shm_segment *seg)
{
    uint64_t start = 0, ns = 0;
    proc_start_time(getpid(), &start);
    proc_pid_namespace(&ns);
    atomic_store_explicit(&seg->hdr->cp_pid, (int32_t)getpid(), memory_order_relaxed);
    atomic_store_explicit(&seg->hdr->cp_start_time, start, memory_order_relaxed);
    atomic_store_explicit(&seg->hdr->cp_pid_namespace, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&seg->hdr->epoch, 1, memory_order_release);
}

/*
 * Refuses an existing object that someone else could have prepared: it must
 * belong to our effective uid and give nothing to group or other. Anyone on
 * the host can create a name in /dev/shm first; adopting such an object
 * would let its owner rewrite worker URLs (and receive the prompts) or
 * truncate it under us (SIGBUS). -EPERM with the owner and mode in err.
 */
int shm_segment_check_owner(int fd, const char *name, char *err, size_t err_len)
{
    return shm_object_check_owner(fd, name, "segment", err, err_len);
}

/* Creates a new object; EEXIST is returned untouched so the caller can decide. */
static int shm_create(struct shm_segment *seg, const char *name, uint32_t max_workers,
                      uint32_t max_dataplanes, char *err, size_t err_len)
{
    size_t size = shm_segment_size_for(max_workers, max_dataplanes);
    struct shm_object o;
    int rc = shm_object_create(name, "segment", size, SHM_OWNER_LOCK_OFFSET, SHM_OWNER_LOCK_LEN, &o,
                               err, err_len);
    if (rc != 0)
        return rc; /* -EEXIST without a message: the caller re-attaches */
    seg->fd = o.fd;
    void *base = o.base;

    /* ftruncate zero-fills; write the geometry, then publish. */
    struct shm_header *hdr = base;
    hdr->layout_version = SHM_LAYOUT_VERSION;
    hdr->header_size = sizeof(struct shm_header);
    hdr->slot_size = sizeof(struct shm_worker_slot);
    hdr->lease_size = sizeof(struct shm_lease);
    hdr->load_line_size = sizeof(struct shm_load_line);
    hdr->max_workers = max_workers;
    hdr->max_dataplanes = max_dataplanes;
    hdr->lines_per_worker = shm_lines_per_worker(max_dataplanes);
    hdr->heartbeat_interval_ms = SHM_HEARTBEAT_INTERVAL_MS;
    hdr->heartbeat_timeout_ms = SHM_HEARTBEAT_TIMEOUT_MS;
    hdr->total_size = size;
    hdr->slots_offset = sizeof(struct shm_header);
    hdr->leases_offset = hdr->slots_offset + (uint64_t)max_workers * sizeof(struct shm_worker_slot);
    hdr->loads_offset = hdr->leases_offset + (uint64_t)max_dataplanes * sizeof(struct shm_lease);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    hdr->created_unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    shm_segment_bind(seg, base, size);
    shm_fill_owner(seg);
    atomic_store_explicit(&hdr->magic, SHM_MAGIC, memory_order_release);
    return 0;
}

/* Opens an existing object as its owner. -ENOENT if it vanished meanwhile;
 * -ESTALE if it was never published (its creator died) and may be replaced. */
static int shm_reattach(struct shm_segment *seg, const char *name, uint32_t max_workers,
                        uint32_t max_dataplanes, char *err, size_t err_len)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_len, "shm_open(%s): %s", name, strerror(e));
        return -e;
    }
    seg->fd = fd;
    int rc = shm_segment_check_owner(fd, name, err, err_len);
    if (rc != 0)
        goto out_close;
    rc = shm_segment_try_lock(seg, SHM_OWNER_LOCK_OFFSET, SHM_OWNER_LOCK_LEN);
    if (rc == -EBUSY) {
        snprintf(err, err_len, "segment %s is owned by another running control plane", name);
        goto out_close;
    }
    if (rc != 0) {
        snprintf(err, err_len, "locking segment %s: %s", name, strerror(-rc));
        goto out_close;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, err_len, "fstat(%s): %s", name, strerror(-rc));
        goto out_close;
    }
    if ((size_t)st.st_size < sizeof(struct shm_header)) {
        /* Holding the owner lock, nobody else is creating it: a dead creator. */
        snprintf(err, err_len, "segment %s is %lld bytes, smaller than a header", name,
                 (long long)st.st_size);
        rc = -ESTALE;
        goto out_close;
    }
    void *base = NULL;
    rc = shm_map(fd, (size_t)st.st_size, &base);
    if (rc != 0) {
        snprintf(err, err_len, "mmap of segment %s: %s", name, strerror(-rc));
        goto out_close;
    }
    rc = shm_segment_validate(base, (uint64_t)st.st_size, err, err_len);
    if (rc == -EAGAIN)
        rc = -ESTALE;
    if (rc != 0)
        goto out_unmap;
    const struct shm_header *hdr = base;
    if (hdr->max_workers != max_workers || hdr->max_dataplanes != max_dataplanes) {
        snprintf(err, err_len,
                 "segment %s was created with max_workers %u and max_dataplanes %u, the config "
                 "says %u and %u: restore those values, or stop every switchyard process on "
                 "this segment and remove it to change them",
                 name, hdr->max_workers, hdr->max_dataplanes, max_workers, max_dataplanes);
        rc = -EPROTO;
        goto out_unmap;
    }
    shm_segment_bind(seg, base, (size_t)st.st_size);
    shm_fill_owner(seg);
    return 0;

out_unmap:
    munmap(base, (size_t)st.st_size);
out_close:
    close(fd);
    seg->fd = -1;
    return rc;
}

int shm_segment_open_owner(struct shm_segment *seg, const char *name, uint32_t max_workers,
                           uint32_t max_dataplanes, enum shm_open_outcome *outcome, char *err,
                           size_t err_len)
{
    shm_segment_reset(seg);
    snprintf(seg->name, sizeof(seg->name), "%s", name);
    if (max_workers == 0 || max_dataplanes == 0 || max_dataplanes > SHM_MAX_DATAPLANES_LIMIT) {
        snprintf(err, err_len, "invalid capacities: max_workers %u, max_dataplanes %u (1..%u)",
                 max_workers, max_dataplanes, SHM_MAX_DATAPLANES_LIMIT);
        return -EINVAL;
    }
    bool replaced = false;
    /* Bounded: each round either succeeds, fails for good, or removes a
     * dead creator's leftovers, which can happen at most once per round. */
    for (int attempt = 0; attempt < 4; attempt++) {
        int rc = shm_create(seg, name, max_workers, max_dataplanes, err, err_len);
        if (rc == 0) {
            seg->owner = true;
            *outcome = replaced ? SHM_OPEN_REPLACED : SHM_OPEN_CREATED;
            return 0;
        }
        if (rc != -EEXIST)
            return rc;
        rc = shm_reattach(seg, name, max_workers, max_dataplanes, err, err_len);
        if (rc == 0) {
            seg->owner = true;
            *outcome = SHM_OPEN_REATTACHED;
            return 0;
        }
        if (rc == -ESTALE) {
            /* Never published: no dataplane attached to it (they wait for
             * the magic), so removing it loses nothing. */
            shm_unlink(name);
            replaced = true;
            continue;
        }
        if (rc != -ENOENT)
            return rc;
    }
    snprintf(err, err_len, "segment %s keeps appearing and vanishing; giving up", name);
    return -EAGAIN;
}

int shm_segment_attach(struct shm_segment *seg, const char *name, char *err, size_t err_len)
{
    shm_segment_reset(seg);
    snprintf(seg->name, sizeof(seg->name), "%s", name);
    struct shm_object o;
    int rc = shm_object_open(name, "segment", sizeof(struct shm_header), &o, err, err_len);
    if (rc == -ENODATA)
        return -EAGAIN; /* being sized by its creator */
    if (rc != 0)
        return rc;
    rc = shm_segment_validate(o.base, (uint64_t)o.size, err, err_len);
    if (rc != 0) {
        shm_object_unmap(&o);
        return rc;
    }
    seg->fd = o.fd;
    shm_segment_bind(seg, o.base, o.size);
    return 0;
}

void shm_segment_close(struct shm_segment *seg)
{
    if (seg == NULL)
        return;
    if (seg->base != NULL)
        munmap(seg->base, seg->size);
    if (seg->fd >= 0)
        close(seg->fd);
    shm_segment_reset(seg);
}

int shm_segment_remove_unused(const char *name, char *err, size_t err_len)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return 0;
        snprintf(err, err_len, "shm_open(%s): %s", name, strerror(e));
        return -e;
    }
    int rc = shm_segment_check_owner(fd, name, err, err_len);
    if (rc == 0) {
        /* l_len 0: every byte to the end, whoever holds which range. */
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
            rc = -errno;
            snprintf(err, err_len, "checking the locks of segment %s: %s", name, strerror(-rc));
        } else if (fl.l_type != F_UNLCK) {
            rc = -EBUSY;
            snprintf(err, err_len,
                     "segment %s is in use by a running control plane or data plane; stop them "
                     "first",
                     name);
        } else if (shm_unlink(name) != 0 && errno != ENOENT) {
            rc = -errno;
            snprintf(err, err_len, "removing segment %s: %s", name, strerror(-rc));
        }
    }
    close(fd);
    return rc;
}

int shm_segment_unlink(const char *name)
{
    return shm_unlink(name) == 0 ? 0 : -errno;
}

void shm_segment_heartbeat(struct shm_segment *seg)
{
    atomic_fetch_add_explicit(&seg->hdr->cp_heartbeat, 1, memory_order_relaxed);
}

void shm_segment_stats(const struct shm_segment *seg, struct shm_segment_stats *out)
{
    struct shm_header *h = seg->hdr;
    out->layout_version = h->layout_version;
    out->heartbeat_interval_ms = h->heartbeat_interval_ms;
    out->heartbeat_timeout_ms = h->heartbeat_timeout_ms;
    out->epoch = atomic_load_explicit(&h->epoch, memory_order_relaxed);
    out->cp_pid = atomic_load_explicit(&h->cp_pid, memory_order_relaxed);
    out->cp_pid_namespace = atomic_load_explicit(&h->cp_pid_namespace, memory_order_relaxed);
    out->cp_heartbeat = atomic_load_explicit(&h->cp_heartbeat, memory_order_relaxed);
    out->registry_changes = atomic_load_explicit(&h->registry_changes, memory_order_relaxed);
    out->leases_reaped = atomic_load_explicit(&h->leases_reaped, memory_order_relaxed);
    out->active_leases = atomic_load_explicit(&h->active_leases, memory_order_acquire);
}

uint64_t shm_segment_created_ms(const struct shm_segment *seg)
{
    return seg->hdr->created_unix_ms; /* written before the magic, never again */
}

uint64_t shm_segment_epoch(const struct shm_segment *seg)
{
    return atomic_load_explicit(&seg->hdr->epoch, memory_order_relaxed);
}

uint32_t shm_segment_heartbeat_interval_ms(const struct shm_segment *seg)
{
    return seg->hdr->heartbeat_interval_ms;
}
