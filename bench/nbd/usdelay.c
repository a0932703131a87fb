/* usdelay: an nbdkit filter that delays every read by a number of
 * microseconds (rdelay-us=N), emulating a storage fabric's latency.
 * nbdkit's own delay filter (1.32, Debian 12) takes whole milliseconds only.
 * The delay is a sleep in the serving thread, so reads in flight overlap
 * their delays, as requests on a real fabric do (with nbdkit -t THREADS).
 *
 * Built by bench/nbd/run_nbd_bench.sh:
 *   cc -O2 -fPIC -shared -o usdelay.so usdelay.c   (needs nbdkit-plugin-dev)
 *   nbdkit --filter=./usdelay.so file VOLUME rdelay-us=200
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nbdkit-filter.h>

static unsigned long delay_us = 0;

static int usdelay_config(nbdkit_next_config *next, nbdkit_backend *nxdata, const char *key,
                          const char *value) {
  if (strcmp(key, "rdelay-us") == 0) {
    char *end;
    errno = 0;
    delay_us = strtoul(value, &end, 10);
    if (errno != 0 || *end != '\0') {
      nbdkit_error("rdelay-us: not a number of microseconds: %s", value);
      return -1;
    }
    return 0;
  }
  return next(nxdata, key, value);
}

static int usdelay_pread(nbdkit_next *next, void *handle, void *buf, uint32_t count,
                         uint64_t offset, uint32_t flags, int *err) {
  (void)handle;
  if (delay_us > 0) {
    struct timespec ts = {(time_t)(delay_us / 1000000), (long)(delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
  }
  return next->pread(next, buf, count, offset, flags, err);
}

static struct nbdkit_filter filter = {
    .name = "usdelay",
    .longname = "read delay in microseconds",
    .config = usdelay_config,
    .config_help = "rdelay-us=<N>  Delay every read by N microseconds.",
    .pread = usdelay_pread,
};

NBDKIT_REGISTER_FILTER(filter)
