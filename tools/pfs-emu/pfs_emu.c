// pfs-emu: a read-only FUSE passthrough that behaves like a parallel file
// system client, for benchmarks and fault tests (not part of the product).
//
// Every READ request that reaches the file system is charged a fixed latency
// plus its bytes at a bandwidth shared by all requests (first come, first
// served), and optionally at a per-view bandwidth (one fake node's link).
// Chosen byte ranges of chosen files fail with EIO. The backing directory is
// exposed once per fake node, as MOUNT/n0 ... MOUNT/nK: the same file seen
// through two views is two FUSE inodes, so each view has its own kernel page
// cache, as each node of a real cluster has its own. `pfs-emu --help` lists the
// options; tools/pfs-emu/README.md says how to use it.
//
// Kernel caching (the point is to behave like a PFS client's page cache):
//  - direct_io is off (unless --direct-io): reads go through the kernel page
//    cache of the view's inode, so only cache misses and readahead reach us;
//  - keep_cache is set on every open: the backing tree must not change while
//    mounted, so cached pages stay valid across close and reopen;
//  - entry and attribute timeouts are an hour and negative lookups are not
//    cached: metadata is static, and a long timeout keeps getattr traffic out
//    of the counts (override with -o entry_timeout=S,attr_timeout=S);
//  - the kernel's readahead window (at most the bdi's read_ahead_kb, 128 KiB by
//    default) decides the size of READ requests; -o max_readahead=N lowers it.

#define FUSE_USE_VERSION 312  // 3.12: the fuse_loop_cfg_* API
#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define PROG "pfs-emu"
#define STATS_NAME ".pfs-emu-stats"
#define MAX_NODES 4096

// One --eio range, matched by the backing file's identity so that any
// spelling of its path (and every view) hits it.
struct EioRange {
  dev_t dev;
  ino_t ino;
  uint64_t offset;
  uint64_t length;
};

struct NodeStats {
  atomic_uint_fast64_t read_requests;
  atomic_uint_fast64_t read_bytes;
  atomic_uint_fast64_t eio_requests;
};

// A link served first come, first served: the time it becomes free.
struct Link {
  double bytes_per_ns;  // 0: unlimited
  uint64_t free_at_ns;
};

struct Emu {
  // Options.
  const char* backing;
  const char* mountpoint;
  int nodes;
  uint64_t latency_ns;
  double bandwidth_mbps;
  double node_bandwidth_mbps;
  unsigned threads;
  bool direct_io;
  struct EioRange* eio;
  size_t eio_count;
  // State.
  int backing_fd;
  struct timespec started;
  uint64_t started_ns;
  pthread_mutex_t link_mu;
  struct Link shared;
  struct Link* node_links;  // [nodes]
  struct NodeStats* stats;  // [nodes]
  atomic_uint_fast64_t meta_requests;
  struct fuse_conn_info_opts* conn_opts;
};

// An open file of a view, or a snapshot of the stats file.
struct Open {
  int fd;  // -1 for the stats file
  int node;
  const struct EioRange** ranges;  // this file's --eio ranges
  size_t range_count;
  char* text;  // stats snapshot
  size_t text_len;
};

static struct Emu* Ctx(void) { return (struct Emu*)fuse_get_context()->private_data; }

static uint64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void SleepUntilNs(uint64_t t) {
  struct timespec ts = {.tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

// Reserves `bytes` on `link` for a request ready at `ready`; returns when the
// transfer ends. Caller holds link_mu.
static uint64_t Reserve(struct Link* link, uint64_t ready, uint64_t bytes) {
  if (link->bytes_per_ns <= 0) return ready;
  const uint64_t start = ready > link->free_at_ns ? ready : link->free_at_ns;
  link->free_at_ns = start + (uint64_t)((double)bytes / link->bytes_per_ns + 0.5);
  return link->free_at_ns;
}

// --- Paths -------------------------------------------------------------------

enum PathKind { kRoot, kStats, kView, kNoEntry };

// Splits "/nX/rest" into the node X and the backing-relative path ("." for the
// view's root). Paths from libfuse are absolute and normalized.
static enum PathKind ParsePath(const struct Emu* e, const char* path, int* node, const char** rel) {
  if (strcmp(path, "/") == 0) return kRoot;
  if (strcmp(path, "/" STATS_NAME) == 0) return kStats;
  if (path[1] != 'n' || path[2] < '0' || path[2] > '9') return kNoEntry;
  if (path[2] == '0' && path[3] != '\0' && path[3] != '/') return kNoEntry;  // "n01"
  long x = 0;
  const char* p = path + 2;
  while (*p >= '0' && *p <= '9') {
    x = x * 10 + (*p - '0');
    if (x >= e->nodes) return kNoEntry;
    ++p;
  }
  if (*p != '\0' && *p != '/') return kNoEntry;
  *node = (int)x;
  *rel = (*p == '\0' || p[1] == '\0') ? "." : p + 1;
  return kView;
}

// --- Stats -------------------------------------------------------------------

// The stats as "name value" lines; the caller frees the result.
static char* FormatStats(const struct Emu* e, size_t* len) {
  char* text = NULL;
  FILE* f = open_memstream(&text, len);
  if (f == NULL) return NULL;
  uint64_t requests = 0, bytes = 0, eio = 0;
  for (int i = 0; i < e->nodes; ++i) {
    requests += atomic_load(&e->stats[i].read_requests);
    bytes += atomic_load(&e->stats[i].read_bytes);
    eio += atomic_load(&e->stats[i].eio_requests);
  }
  fprintf(f, "# " PROG " stats: READ requests that reached the file system\n");
  fprintf(f, "read_requests %" PRIu64 "\nread_bytes %" PRIu64 "\neio_requests %" PRIu64 "\n",
          requests, bytes, eio);
  fprintf(f, "meta_requests %" PRIu64 "\n", (uint64_t)atomic_load(&e->meta_requests));
  for (int i = 0; i < e->nodes; ++i) {
    fprintf(f,
            "n%d_read_requests %" PRIu64 "\nn%d_read_bytes %" PRIu64 "\nn%d_eio_requests %" PRIu64
            "\n",
            i, (uint64_t)atomic_load(&e->stats[i].read_requests), i,
            (uint64_t)atomic_load(&e->stats[i].read_bytes), i,
            (uint64_t)atomic_load(&e->stats[i].eio_requests));
  }
  fprintf(f, "elapsed_s %.3f\n", (double)(NowNs() - e->started_ns) / 1e9);
  fprintf(f, "nodes %d\nlatency_us %" PRIu64 "\nbandwidth_mbps %g\nnode_bandwidth_mbps %g\n",
          e->nodes, e->latency_ns / 1000, e->bandwidth_mbps, e->node_bandwidth_mbps);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

// --- File system operations --------------------------------------------------

static void* Init(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  struct Emu* e = Ctx();
  fuse_apply_conn_info_opts(e->conn_opts, conn);
  cfg->use_ino = 0;      // libfuse numbers inodes per path: distinct per view
  cfg->nullpath_ok = 1;  // reads use the handle, not the path (less locking)
  cfg->direct_io = e->direct_io;
  cfg->kernel_cache = 0;  // keep_cache is set per open instead
  cfg->auto_cache = 0;
  return e;
}

static void FillRootAttr(const struct Emu* e, struct stat* st) {
  memset(st, 0, sizeof *st);
  st->st_mode = S_IFDIR | 0555;
  st->st_nlink = 2 + (nlink_t)e->nodes;
  st->st_uid = getuid();
  st->st_gid = getgid();
  st->st_atim = st->st_mtim = st->st_ctim = e->started;
}

static int GetAttr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  struct Emu* e = Ctx();
  if (fi != NULL && path == NULL) {  // nullpath_ok: fstat the handle
    const struct Open* o = (const struct Open*)(uintptr_t)fi->fh;
    if (o->fd < 0) return -ENOENT;
    atomic_fetch_add(&e->meta_requests, 1);
    return fstat(o->fd, st) == 0 ? 0 : -errno;
  }
  int node;
  const char* rel;
  switch (ParsePath(e, path, &node, &rel)) {
    case kRoot:
      FillRootAttr(e, st);
      return 0;
    case kStats:
      FillRootAttr(e, st);
      st->st_mode = S_IFREG | 0444;
      st->st_nlink = 1;
      st->st_size = 0;  // served with direct_io: read until EOF
      return 0;
    case kView:
      atomic_fetch_add(&e->meta_requests, 1);
      return fstatat(e->backing_fd, rel, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
    case kNoEntry:
      break;
  }
  return -ENOENT;
}

static int ReadLink(const char* path, char* buf, size_t size) {
  struct Emu* e = Ctx();
  int node;
  const char* rel;
  if (ParsePath(e, path, &node, &rel) != kView) return -EINVAL;
  atomic_fetch_add(&e->meta_requests, 1);
  const ssize_t n = readlinkat(e->backing_fd, rel, buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

// An open directory: the root (fd -1) or a directory of a view. With
// nullpath_ok, readdir gets no path, so the handle says what to list.
static int OpenDir(const char* path, struct fuse_file_info* fi) {
  struct Emu* e = Ctx();
  int node;
  const char* rel;
  const enum PathKind kind = ParsePath(e, path, &node, &rel);
  if (kind == kRoot) {
    fi->fh = (uint64_t)-1;
    return 0;
  }
  if (kind != kView) return kind == kStats ? -ENOTDIR : -ENOENT;
  atomic_fetch_add(&e->meta_requests, 1);
  const int fd = openat(e->backing_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  return 0;
}

static int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t offset,
                   struct fuse_file_info* fi, enum fuse_readdir_flags flags) {
  (void)path;
  (void)offset;
  (void)flags;
  struct Emu* e = Ctx();
  if (fi->fh == (uint64_t)-1) {  // the views; the stats file is not listed, so walks skip it
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    for (int i = 0; i < e->nodes; ++i) {
      char name[16];
      snprintf(name, sizeof name, "n%d", i);
      struct stat st = {.st_mode = S_IFDIR};
      fill(buf, name, &st, 0, 0);
    }
    return 0;
  }
  // All entries in one call (offset 0 mode): libfuse buffers them. A dup, so
  // that closedir leaves the handle's descriptor open.
  const int fd = dup((int)fi->fh);
  if (fd < 0) return -errno;
  DIR* dir = fdopendir(fd);
  if (dir == NULL) {
    const int err = errno;
    close(fd);
    return -err;
  }
  rewinddir(dir);
  int rc = 0;
  for (;;) {
    errno = 0;
    const struct dirent* d = readdir(dir);
    if (d == NULL) {
      rc = -errno;
      break;
    }
    struct stat st = {.st_ino = d->d_ino, .st_mode = (mode_t)(DTTOIF(d->d_type))};
    if (fill(buf, d->d_name, &st, 0, 0) != 0) break;
  }
  closedir(dir);
  return rc;
}

static int ReleaseDir(const char* path, struct fuse_file_info* fi) {
  (void)path;
  if (fi->fh != (uint64_t)-1) close((int)fi->fh);
  return 0;
}

static int Open(const char* path, struct fuse_file_info* fi) {
  struct Emu* e = Ctx();
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  int node;
  const char* rel;
  const enum PathKind kind = ParsePath(e, path, &node, &rel);
  if (kind == kRoot) return -EISDIR;
  if (kind == kNoEntry) return -ENOENT;
  struct Open* o = calloc(1, sizeof *o);
  if (o == NULL) return -ENOMEM;
  o->fd = -1;
  if (kind == kStats) {
    // A snapshot taken at open, so one read(2) loop sees consistent numbers.
    o->text = FormatStats(e, &o->text_len);
    if (o->text == NULL) {
      free(o);
      return -ENOMEM;
    }
    fi->direct_io = 1;  // never cached: every open shows the current counts
    fi->fh = (uint64_t)(uintptr_t)o;
    return 0;
  }
  atomic_fetch_add(&e->meta_requests, 1);
  o->node = node;
  o->fd = openat(e->backing_fd, rel, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (o->fd < 0 || fstat(o->fd, &st) != 0) {
    const int err = errno;
    if (o->fd >= 0) close(o->fd);
    free(o);
    return -err;
  }
  for (size_t i = 0; i < e->eio_count; ++i) {
    if (e->eio[i].dev != st.st_dev || e->eio[i].ino != st.st_ino) continue;
    const struct EioRange** grown = realloc(o->ranges, (o->range_count + 1) * sizeof *grown);
    if (grown == NULL) {
      close(o->fd);
      free(o->ranges);
      free(o);
      return -ENOMEM;
    }
    o->ranges = grown;
    o->ranges[o->range_count++] = &e->eio[i];
  }
  fi->keep_cache = 1;  // static backing tree: cached pages stay valid
  fi->direct_io = e->direct_io;
  fi->fh = (uint64_t)(uintptr_t)o;
  return 0;
}

static int Read(const char* path, char* buf, size_t size, off_t offset, struct fuse_file_info* fi) {
  (void)path;
  const uint64_t arrived = NowNs();
  struct Emu* e = Ctx();
  const struct Open* o = (const struct Open*)(uintptr_t)fi->fh;
  if (o->fd < 0) {  // the stats file: free, uncounted
    if ((uint64_t)offset >= o->text_len) return 0;
    const size_t n = o->text_len - (size_t)offset < size ? o->text_len - (size_t)offset : size;
    memcpy(buf, o->text + offset, n);
    return (int)n;
  }
  // A request fails if any requested byte lies in a range (whether or not it
  // lies before EOF): the kernel asks for whole pages, so with the page cache
  // the failure covers the pages that overlap the range.
  const uint64_t begin = (uint64_t)offset, end = (uint64_t)offset + size;
  bool fail = false;
  for (size_t i = 0; i < o->range_count && !fail; ++i) {
    const struct EioRange* r = o->ranges[i];
    fail = begin < r->offset + r->length && r->offset < end;
  }
  ssize_t n = 0;
  int err = EIO;
  if (!fail) {
    n = pread(o->fd, buf, size, offset);
    if (n < 0) {
      err = errno;
      fail = true;
      n = 0;
    }
  }
  // Latency overlaps between requests; bytes queue on the links. A failed
  // request moves no bytes but still waits its latency.
  const uint64_t ready = arrived + e->latency_ns;
  pthread_mutex_lock(&e->link_mu);
  const uint64_t shared_end = Reserve(&e->shared, ready, (uint64_t)n);
  const uint64_t node_end = Reserve(&e->node_links[o->node], ready, (uint64_t)n);
  pthread_mutex_unlock(&e->link_mu);
  SleepUntilNs(shared_end > node_end ? shared_end : node_end);

  struct NodeStats* s = &e->stats[o->node];
  atomic_fetch_add(&s->read_requests, 1);
  if (fail) {
    atomic_fetch_add(&s->eio_requests, 1);
    return -err;
  }
  atomic_fetch_add(&s->read_bytes, (uint64_t)n);
  return (int)n;
}

static int Release(const char* path, struct fuse_file_info* fi) {
  (void)path;
  struct Open* o = (struct Open*)(uintptr_t)fi->fh;
  if (o->fd >= 0) close(o->fd);
  free(o->ranges);
  free(o->text);
  free(o);
  return 0;
}

static int StatFs(const char* path, struct statvfs* st) {
  (void)path;
  return fstatvfs(Ctx()->backing_fd, st) == 0 ? 0 : -errno;
}

// --- Options -----------------------------------------------------------------

static void Usage(FILE* out) {
  fprintf(out,
          "Usage: " PROG
          " [OPTIONS] BACKING_DIR MOUNTPOINT\n"
          "\n"
          "A read-only FUSE passthrough of BACKING_DIR that behaves like a parallel file\n"
          "system client, for benchmarks and fault tests. MOUNTPOINT/n0 ... MOUNTPOINT/nK\n"
          "each show the whole backing tree as a separate fake node: a file read through\n"
          "n0/ and through n1/ is two inodes with two kernel page caches. Runs in the\n"
          "foreground until unmounted (fusermount3 -u MOUNTPOINT, or SIGINT/SIGTERM).\n"
          "\n"
          "Every READ request that reaches the file system (a page-cache miss or a\n"
          "readahead, up to 128 KiB by default) waits LATENCY, then queues its bytes\n"
          "first come, first served on the shared link and, if set, on its view's link;\n"
          "it completes when both transfers are done. Requests overlap: latency is per\n"
          "request, not serialized. Metadata requests are counted but not charged.\n"
          "\n"
          "Options:\n"
          "  --nodes N                 views n0 ... n(N-1) (default 1, at most %d)\n"
          "  --latency-us US           latency charged to every READ request, in\n"
          "                            microseconds (default 0)\n"
          "  --bandwidth-mbps MB       bandwidth shared by all READ requests, in MB/s\n"
          "                            (10^6 bytes/s, not megabits; default 0: unlimited)\n"
          "  --node-bandwidth-mbps MB  bandwidth of each view (a node's link), in MB/s\n"
          "                            (default 0: unlimited)\n"
          "  --eio FILE:OFFSET:LENGTH  READ requests of FILE overlapping bytes\n"
          "                            [OFFSET, OFFSET+LENGTH) fail with EIO, in every\n"
          "                            view. FILE is relative to BACKING_DIR (or absolute)\n"
          "                            and must exist; OFFSET and LENGTH are bytes, decimal\n"
          "                            or 0x-hex, LENGTH > 0. Repeatable. With the page\n"
          "                            cache a failure covers the 4 KiB pages that overlap\n"
          "                            the range; with --direct-io it is byte-exact.\n"
          "  --direct-io               bypass the kernel page cache (every read(2) is a\n"
          "                            READ request; no shared mmap)\n"
          "  --threads N               most FUSE worker threads, i.e. requests served at\n"
          "                            once (default 64)\n"
          "  -o OPT[,OPT...]           passed to libfuse: mount options (allow_other, ...),\n"
          "                            entry_timeout=S, attr_timeout=S, max_readahead=N,\n"
          "                            max_background=N, ...\n"
          "  -d, --debug               libfuse debug output on stderr\n"
          "  -h, --help                this text\n"
          "\n"
          "Statistics (\"name value\" lines: read_requests, read_bytes, eio_requests,\n"
          "meta_requests, the same per view as nX_read_requests ..., elapsed_s, and the\n"
          "settings) are printed to stderr at unmount, and while mounted are read from\n"
          "the unlisted file MOUNTPOINT/" STATS_NAME
          " (a fresh snapshot per open;\n"
          "reading it is not counted). read_bytes counts bytes returned, not requested.\n"
          "\n"
          "Example: 4 fake nodes, 1 ms per request, 400 MB/s shared, 100 MB/s per node:\n"
          "  " PROG
          " --nodes 4 --latency-us 1000 --bandwidth-mbps 400 \\\n"
          "          --node-bandwidth-mbps 100 /data/db /mnt/pfs &\n"
          "  until mountpoint -q /mnt/pfs; do sleep 0.1; done\n"
          "  cat /mnt/pfs/" STATS_NAME
          "; fusermount3 -u /mnt/pfs; wait\n"
          "\n"
          "Exit status: 0 after a clean unmount, 1 on a runtime error, 2 on a usage error.\n",
          MAX_NODES);
}

static void UsageError(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry '" PROG " --help'.\n");
  va_end(ap);
  exit(2);
}

// Parses a non-negative integer: decimal, or hex with a 0x prefix.
static bool ParseU64(const char* s, uint64_t* out) {
  if (s == NULL || *s == '\0' || *s == '-' || *s == '+' || *s == ' ') return false;
  int base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
    if (*s == '\0') return false;
  }
  char* end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, base);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

static double ParseMbps(const char* opt, const char* s) {
  char* end;
  errno = 0;
  const double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || errno != 0 || !(v >= 0) || v > 1e9) {
    UsageError("%s: '%s' is not a bandwidth in MB/s (a number >= 0, 0 = unlimited)", opt, s);
  }
  return v;
}

// FILE:OFFSET:LENGTH, split at the last two colons so FILE may contain some.
static void ParseEio(struct Emu* e, int backing_fd, const char* spec) {
  char* copy = strdup(spec);
  char* c2 = copy ? strrchr(copy, ':') : NULL;
  if (c2 == NULL) UsageError("--eio '%s': expected FILE:OFFSET:LENGTH", spec);
  *c2 = '\0';
  char* c1 = strrchr(copy, ':');
  if (c1 == NULL || c1 == copy) UsageError("--eio '%s': expected FILE:OFFSET:LENGTH", spec);
  *c1 = '\0';
  struct EioRange r;
  if (!ParseU64(c1 + 1, &r.offset)) {
    UsageError("--eio '%s': OFFSET '%s' is not a non-negative integer", spec, c1 + 1);
  }
  if (!ParseU64(c2 + 1, &r.length) || r.length == 0) {
    UsageError("--eio '%s': LENGTH '%s' is not a positive integer", spec, c2 + 1);
  }
  if (r.offset + r.length < r.offset) UsageError("--eio '%s': OFFSET + LENGTH overflows", spec);
  struct stat st;
  if (fstatat(backing_fd, copy, &st, 0) != 0) {
    UsageError("--eio '%s': cannot stat '%s' under %s: %s", spec, copy, e->backing,
               strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) UsageError("--eio '%s': '%s' is not a regular file", spec, copy);
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  struct EioRange* grown = realloc(e->eio, (e->eio_count + 1) * sizeof *grown);
  if (grown == NULL) UsageError("out of memory");
  e->eio = grown;
  e->eio[e->eio_count++] = r;
  free(copy);
}

// MOUNTPOINT must be a directory outside BACKING_DIR: a mount inside the tree
// it serves would show itself in every view (endless walks, self-deadlock).
static void CheckMountpoint(const char* backing, const char* mountpoint) {
  struct stat st;
  if (stat(mountpoint, &st) != 0) {
    UsageError("cannot use mount point '%s': %s", mountpoint, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) UsageError("mount point '%s' is not a directory", mountpoint);
  char* b = realpath(backing, NULL);
  char* m = realpath(mountpoint, NULL);
  if (b == NULL || m == NULL) UsageError("cannot resolve '%s' or '%s'", backing, mountpoint);
  const size_t n = strlen(b);
  if (strncmp(b, m, n) == 0 && (m[n] == '\0' || m[n] == '/' || n == 1)) {
    UsageError("mount point '%s' is inside the backing directory '%s'", mountpoint, backing);
  }
  free(b);
  free(m);
}

static bool AddArg(struct fuse_args* args, const char* arg) {
  return fuse_opt_add_arg(args, arg) == 0;
}

int main(int argc, char** argv) {
  static struct Emu e = {.nodes = 1, .threads = 64, .backing_fd = -1};
  enum { kLatency = 256, kBandwidth, kNodeBandwidth, kNodes, kEio, kThreads, kDirectIo };
  static const struct option kLong[] = {
      {"latency-us", required_argument, NULL, kLatency},
      {"bandwidth-mbps", required_argument, NULL, kBandwidth},
      {"node-bandwidth-mbps", required_argument, NULL, kNodeBandwidth},
      {"nodes", required_argument, NULL, kNodes},
      {"eio", required_argument, NULL, kEio},
      {"threads", required_argument, NULL, kThreads},
      {"direct-io", no_argument, NULL, kDirectIo},
      {"debug", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
  // Defaults first, so that -o options given by the user override them.
  if (!AddArg(&args, argv[0]) || !AddArg(&args, "-o") ||
      !AddArg(&args, "ro,default_permissions,fsname=" PROG ",subtype=" PROG
                     ",entry_timeout=3600,attr_timeout=3600,negative_timeout=0")) {
    UsageError("out of memory");
  }
  const char** eio_specs = calloc((size_t)argc, sizeof *eio_specs);
  size_t eio_specs_count = 0;
  opterr = 0;  // our own messages
  int c;
  while ((c = getopt_long(argc, argv, ":ho:d", kLong, NULL)) != -1) {
    uint64_t v;
    switch (c) {
      case 'h':
        Usage(stdout);
        free(eio_specs);
        fuse_opt_free_args(&args);
        return 0;
      case 'o':
        if (!AddArg(&args, "-o") || !AddArg(&args, optarg)) UsageError("out of memory");
        break;
      case 'd':
        if (!AddArg(&args, "-d")) UsageError("out of memory");
        break;
      case kLatency:
        if (!ParseU64(optarg, &v) || v > 3600u * 1000000u) {
          UsageError("--latency-us: '%s' is not a latency in microseconds (0 to 3600000000)",
                     optarg);
        }
        e.latency_ns = v * 1000u;
        break;
      case kBandwidth:
        e.bandwidth_mbps = ParseMbps("--bandwidth-mbps", optarg);
        break;
      case kNodeBandwidth:
        e.node_bandwidth_mbps = ParseMbps("--node-bandwidth-mbps", optarg);
        break;
      case kNodes:
        if (!ParseU64(optarg, &v) || v < 1 || v > MAX_NODES) {
          UsageError("--nodes: '%s' is not a node count (1 to %d)", optarg, MAX_NODES);
        }
        e.nodes = (int)v;
        break;
      case kEio:
        eio_specs[eio_specs_count++] = optarg;  // checked once BACKING_DIR is known
        break;
      case kThreads:
        if (!ParseU64(optarg, &v) || v < 1 || v > 1024) {
          UsageError("--threads: '%s' is not a thread count (1 to 1024)", optarg);
        }
        e.threads = (unsigned)v;
        break;
      case kDirectIo:
        e.direct_io = true;
        break;
      case ':':
        UsageError("option '%s' needs a value", argv[optind - 1]);
        break;
      default:
        UsageError("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (argc - optind != 2) {
    UsageError("expected BACKING_DIR and MOUNTPOINT, got %d argument%s", argc - optind,
               argc - optind == 1 ? "" : "s");
  }
  e.backing = argv[optind];
  e.mountpoint = argv[optind + 1];
  e.backing_fd = open(e.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (e.backing_fd < 0) {
    UsageError("cannot open backing directory '%s': %s", e.backing, strerror(errno));
  }
  CheckMountpoint(e.backing, e.mountpoint);
  for (size_t i = 0; i < eio_specs_count; ++i) ParseEio(&e, e.backing_fd, eio_specs[i]);
  free(eio_specs);

  e.conn_opts = fuse_parse_conn_info_opts(&args);
  e.stats = calloc((size_t)e.nodes, sizeof *e.stats);
  e.node_links = calloc((size_t)e.nodes, sizeof *e.node_links);
  if (e.conn_opts == NULL || e.stats == NULL || e.node_links == NULL) {
    fprintf(stderr, PROG ": cannot parse the -o options or allocate the views\n");
    return 2;
  }
  e.shared.bytes_per_ns = e.bandwidth_mbps * 1e6 / 1e9;
  for (int i = 0; i < e.nodes; ++i) e.node_links[i].bytes_per_ns = e.node_bandwidth_mbps * 1e-3;
  pthread_mutex_init(&e.link_mu, NULL);
  clock_gettime(CLOCK_REALTIME, &e.started);
  e.started_ns = NowNs();

  static const struct fuse_operations ops = {
      .init = Init,
      .getattr = GetAttr,
      .readlink = ReadLink,
      .opendir = OpenDir,
      .readdir = ReadDir,
      .releasedir = ReleaseDir,
      .open = Open,
      .read = Read,
      .release = Release,
      .statfs = StatFs,
  };
  struct fuse* f = fuse_new(&args, &ops, sizeof ops, &e);
  if (f == NULL) {  // libfuse printed why (e.g. an unknown -o option)
    fprintf(stderr, PROG ": libfuse rejected the options\n");
    return 2;
  }
  if (fuse_mount(f, e.mountpoint) != 0) {
    fprintf(stderr, PROG ": cannot mount at '%s'\n", e.mountpoint);
    fuse_destroy(f);
    return 1;
  }
  struct fuse_session* se = fuse_get_session(f);
  int status = 0;
  if (fuse_set_signal_handlers(se) != 0) {
    fprintf(stderr, PROG ": cannot install signal handlers\n");
    status = 1;
  } else {
    fprintf(stderr, PROG ": serving %s at %s as n0 ... n%d\n", e.backing, e.mountpoint,
            e.nodes - 1);
    struct fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, e.threads);
    fuse_loop_cfg_set_idle_threads(config, e.threads);  // no thread churn under load
    const int rc = fuse_loop_mt(f, config);
    fuse_loop_cfg_destroy(config);
    // A signal ends the loop with its number; only a negative value is an error.
    if (rc < 0) {
      fprintf(stderr, PROG ": the FUSE loop failed: %s\n", strerror(-rc));
      status = 1;
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_unmount(f);
  fuse_destroy(f);
  fuse_opt_free_args(&args);

  size_t len = 0;
  char* text = FormatStats(&e, &len);
  if (text != NULL) {
    fputs(text, stderr);
    free(text);
  }
  free(e.conn_opts);
  free(e.stats);
  free(e.node_links);
  free(e.eio);
  close(e.backing_fd);
  return status;
}
