/*
 * bench_exec.c - the benchmark driver that talks to the sandbox API directly (no server, no HTTP).
 *
 *   bench_exec [--backend B] [--image DIR] [--init PATH] [--server-like yes] [--launcher yes]
 *              exec N WARMUP CMD
 *   bench_exec [...] start N WARMUP [GAP_MS]
 *   bench_exec [...] pool N WARMUP [GAP_MS]
 *   bench_exec [...] density N
 *   bench_exec [...] outputs FILES BYTES REPS
 *
 * exec:    one sandbox, WARMUP then N round trips of CMD through the guest protocol; per exec the
 *          host wall time (request sent to exit frame decoded) and the guest's own duration (fork
 *          to reap inside the sandbox).
 * start:   N in-process create -> exec("/bin/true") -> destroy cycles: the start path without the
 *          cost of starting a process, loading shared libraries and compiling the seccomp filter.
 *          GAP_MS (default 0) idles between cycles, as a server does between runs: back-to-back
 *          cycles keep kernel state warm (the cgroup migration lock's RCU state in particular)
 *          that a sandbox created after a pause does not find.
 * pool:    the same cycles, each taking its sandbox from a warm pool of 2 (src/sandbox/pool.c) that
 *          is refilled between cycles, untimed: what a server's run sees when the pool is warm.
 * density: N live idle sandboxes (created, init waiting on its channel), then the memory they
 *          take: PSS and RSS of every process in their cgroups (/proc/PID/smaps_rollup), the
 *          cgroups' memory usage, the host's MemAvailable drop, and this driver's own RSS growth
 *          (the host side of each sandbox); then every one is destroyed.
 * outputs: one sandbox with FILES files of BYTES/FILES random bytes under out/, then REPS rounds
 *          of a run's outputs collection (eph_outputs_collect, every file under out/: list_files,
 * then read_file per file, as a run's worker does) and of `tar -cf - out` with its whole stdout
 * kept (the same bytes over the same guest channel, as one exec's output), alternately; each
 * checked to have brought every byte back.
 *
 * --server-like yes: before the mode, this process takes the shape of a running server as a clone
 *          sees it (its thread count and resident heap): what a sandbox cloned from the server
 *          itself costs. --launcher yes: the sandbox launcher is started first, as `serve` does,
 * and clones the namespaces backend's sandboxes from its small copy instead.
 *
 * Output: one JSON object on stdout (bench/bench.py reads it); diagnostics on stderr. Every loop is
 * bounded in count and in time (BENCH_TIME_CAP_S, default 120 s per mode). This is measurement:
 * nothing here asserts a duration.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/commands.h"
#include "run/outputs.h"
#include "sandbox/pool.h"
#include "sandbox/sandbox.h"

#define MAX_N 100000
#define MAX_DENSITY 4096

static double time_cap_s = 120.0;

static void usage(void)
{
    fputs("usage: bench_exec [--backend B] [--image DIR] [--init PATH] [--server-like yes]\n"
          "                  [--launcher yes] exec N WARMUP CMD\n"
          "       bench_exec [...] start N WARMUP [GAP_MS]\n"
          "       bench_exec [...] pool N WARMUP [GAP_MS]\n"
          "       bench_exec [...] density N\n"
          "       bench_exec [...] outputs FILES BYTES REPS\n",
          stderr);
}

static long parse_count(const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -1;
    return v;
}

static double now_s(void)
{
    return (double)eph_clock_mono_ns() / 1e9;
}

static void print_array_u64(const char *name, const uint64_t *v, size_t n, bool last)
{
    printf("\"%s\":[", name);
    for (size_t i = 0; i < n; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
    printf("]%s", last ? "" : ",");
}

static int one_exec(struct eph_sandbox *sb, const char *cmd, uint64_t *wall_ns, uint64_t *guest_us)
{
    struct eph_exec_request req = {
        .command = cmd, .timeout_ms = 10000, .stdout_cap = 4096, .stderr_cap = 4096};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    uint64_t t0 = eph_clock_mono_ns();
    int rc = eph_sandbox_exec(sb, &req, &res);
    uint64_t t1 = eph_clock_mono_ns();
    if (!rc && (res.signal || res.exit_code != 0)) {
        fprintf(stderr, "bench_exec: '%s' exited with %d (signal %d): %.*s\n", cmd, res.exit_code,
                res.signal, (int)res.err.len, res.err.data ? res.err.data : "");
        rc = -EIO;
    }
    if (wall_ns)
        *wall_ns = t1 - t0;
    if (guest_us)
        *guest_us = res.duration_us;
    eph_exec_result_release(&res);
    return rc;
}

static int mode_exec(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops *ops,
                     long n, long warmup, const char *cmd)
{
    struct eph_sandbox *sb = NULL;
    uint64_t t0 = eph_clock_mono_ns();
    int rc = ops->create(cfg, &sb);
    uint64_t create_ns = eph_clock_mono_ns() - t0;
    if (rc) {
        fprintf(stderr, "bench_exec: create: %s\n", eph_strerror(rc));
        return 1;
    }
    uint64_t *wall = calloc((size_t)n + 1, sizeof(*wall));
    uint64_t *guest = calloc((size_t)n + 1, sizeof(*guest));
    if (!wall || !guest) {
        free(wall);
        free(guest);
        eph_sandbox_destroy(sb);
        return 1;
    }
    double stop = now_s() + time_cap_s;
    for (long i = 0; i < warmup && !rc && now_s() < stop; i++)
        rc = one_exec(sb, cmd, NULL, NULL);
    long done = 0;
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t tl0 = eph_clock_mono_ns();
    for (; done < n && !rc && now_s() < stop; done++)
        rc = one_exec(sb, cmd, &wall[done], &guest[done]);
    uint64_t loop_ns = eph_clock_mono_ns() - tl0;
    getrusage(RUSAGE_SELF, &ru1);
    if (rc) {
        fprintf(stderr, "bench_exec: exec: %s\n", eph_strerror(rc));
        done = done > 0 ? done - 1 : 0;
    }
    int drc = eph_sandbox_destroy(sb);
    double host_cpu_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                        (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
                        (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                        (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    printf("{\"mode\":\"exec\",\"backend\":\"%s\",\"n\":%ld,\"create_ns\":%llu,\"loop_ns\":%llu,"
           "\"host_cpu_s\":%.6f,",
           ops->name, done, (unsigned long long)create_ns, (unsigned long long)loop_ns, host_cpu_s);
    print_array_u64("wall_ns", wall, (size_t)done, false);
    print_array_u64("guest_us", guest, (size_t)done, true);
    printf("}\n");
    free(wall);
    free(guest);
    return rc || drc ? 1 : 0;
}

static int mode_start(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops *ops,
                      long n, long warmup, long gap_ms, bool pool)
{
    struct eph_sandbox_pool *wp = NULL;
    if (pool && (eph_sandbox_pool_new(&wp) || eph_sandbox_pool_start(wp, ops, cfg, 2) != 0))
        return 1;
    struct timespec gap = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
    uint64_t *ph[3];
    for (int k = 0; k < 3; k++)
        ph[k] = calloc((size_t)n + 1, sizeof(uint64_t));
    if (!ph[0] || !ph[1] || !ph[2])
        return 1;
    double stop = now_s() + time_cap_s;
    long done = 0;
    int rc = 0;
    for (long i = 0; i < warmup + n && !rc && now_s() < stop; i++) {
        struct eph_sandbox *sb = NULL;
        if (gap_ms)
            nanosleep(&gap, NULL);
        if (pool)
            (void)eph_sandbox_pool_wait_full(wp, 10000); /* refilled between runs, untimed */
        uint64_t t0 = eph_clock_mono_ns();
        rc = pool ? eph_sandbox_pool_take(wp, ops, cfg, &sb, NULL) : ops->create(cfg, &sb);
        uint64_t t1 = eph_clock_mono_ns();
        if (rc) {
            fprintf(stderr, "bench_exec: create: %s\n", eph_strerror(rc));
            break;
        }
        rc = one_exec(sb, "/bin/true", NULL, NULL);
        uint64_t t2 = eph_clock_mono_ns();
        int drc = eph_sandbox_destroy(sb);
        uint64_t t3 = eph_clock_mono_ns();
        if (!rc)
            rc = drc;
        if (!rc && i >= warmup) {
            ph[0][done] = t1 - t0;
            ph[1][done] = t2 - t1;
            ph[2][done] = t3 - t2;
            done++;
        }
    }
    eph_sandbox_pool_free(wp);
    printf("{\"mode\":\"%s\",\"backend\":\"%s\",\"n\":%ld,\"gap_ms\":%ld,", pool ? "pool" : "start",
           ops->name, done, gap_ms);
    print_array_u64("create_ns", ph[0], (size_t)done, false);
    print_array_u64("exec_ns", ph[1], (size_t)done, false);
    print_array_u64("destroy_ns", ph[2], (size_t)done, true);
    printf("}\n");
    for (int k = 0; k < 3; k++)
        free(ph[k]);
    return rc ? 1 : 0;
}

/* ---- density ---------------------------------------------------------------------------- */

/* A "Key:   123 kB" line of a /proc file, in KiB; -1 when absent. */
static long proc_kib(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    size_t klen = strlen(key);
    long v = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static long long read_ll(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

struct density_sum {
    long cgroups;
    long procs;
    long long pss_kib, rss_kib, cg_bytes;
};

/* The sandboxes' cgroups are ephemeral/bench-<our pid>-<n> (cgroup.c names them after the owner
 * tag and the creating process); v1 keeps them in the memory hierarchy, v2 at its root. */
static void density_measure(struct density_sum *s)
{
    static const char *const roots[] = {"/sys/fs/cgroup/memory/ephemeral",
                                        "/sys/fs/cgroup/unified/ephemeral",
                                        "/sys/fs/cgroup/ephemeral"};
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "bench-%d-", (int)getpid());
    memset(s, 0, sizeof(*s));
    for (size_t r = 0; r < sizeof(roots) / sizeof(roots[0]); r++) {
        DIR *d = opendir(roots[r]);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
                continue;
            char path[512];
            snprintf(path, sizeof(path), "%s/%s/memory.usage_in_bytes", roots[r], e->d_name);
            long long b = read_ll(path);
            if (b < 0) {
                snprintf(path, sizeof(path), "%s/%s/memory.current", roots[r], e->d_name);
                b = read_ll(path);
            }
            if (b < 0)
                continue; /* not the memory controller's directory */
            s->cgroups++;
            s->cg_bytes += b;
            snprintf(path, sizeof(path), "%s/%s/cgroup.procs", roots[r], e->d_name);
            FILE *f = fopen(path, "re");
            int pid;
            while (f && fscanf(f, "%d", &pid) == 1) {
                char sp[64];
                snprintf(sp, sizeof(sp), "/proc/%d/smaps_rollup", pid);
                long pss = proc_kib(sp, "Pss"), rss = proc_kib(sp, "Rss");
                s->procs++;
                s->pss_kib += pss > 0 ? pss : 0;
                s->rss_kib += rss > 0 ? rss : 0;
            }
            if (f)
                fclose(f);
        }
        closedir(d);
    }
}

static int mode_density(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops *ops,
                        long n)
{
    struct eph_sandbox **sbs = calloc((size_t)n + 1, sizeof(*sbs));
    if (!sbs)
        return 1;
    long avail0 = proc_kib("/proc/meminfo", "MemAvailable");
    long self0 = proc_kib("/proc/self/status", "VmRSS");
    double stop = now_s() + time_cap_s;
    uint64_t t0 = eph_clock_mono_ns();
    long live = 0;
    int rc = 0;
    while (live < n && now_s() < stop) {
        rc = ops->create(cfg, &sbs[live]);
        if (rc) {
            fprintf(stderr, "bench_exec: density: sandbox %ld: %s\n", live + 1, eph_strerror(rc));
            break;
        }
        live++;
    }
    uint64_t create_ns = eph_clock_mono_ns() - t0;
    /* Every sandbox still answers: they are live, not just not yet reaped. */
    long answering = 0;
    for (long i = 0; i < live; i++)
        if (one_exec(sbs[i], "true", NULL, NULL) == 0)
            answering++;
    struct density_sum s;
    density_measure(&s);
    long avail1 = proc_kib("/proc/meminfo", "MemAvailable");
    long self1 = proc_kib("/proc/self/status", "VmRSS");
    uint64_t t1 = eph_clock_mono_ns();
    int drc = 0;
    for (long i = 0; i < live; i++) {
        int r = eph_sandbox_destroy(sbs[i]);
        if (r && !drc)
            drc = r;
    }
    uint64_t destroy_ns = eph_clock_mono_ns() - t1;
    free(sbs);
    printf("{\"mode\":\"density\",\"backend\":\"%s\",\"asked\":%ld,\"live\":%ld,\"answering\":%ld,"
           "\"create_ns\":%llu,\"destroy_ns\":%llu,\"cgroups\":%ld,\"procs\":%ld,"
           "\"pss_kib\":%lld,\"rss_kib\":%lld,\"cgroup_bytes\":%lld,\"memavail_drop_kib\":%ld,"
           "\"driver_rss_growth_kib\":%ld}\n",
           ops->name, n, live, answering, (unsigned long long)create_ns,
           (unsigned long long)destroy_ns, s.cgroups, s.procs, s.pss_kib, s.rss_kib, s.cg_bytes,
           avail0 - avail1, self1 - self0);
    if (drc)
        fprintf(stderr, "bench_exec: density: destroy: %s\n", eph_strerror(drc));
    return rc || drc ? 1 : 0;
}

/* One round of tar over the exec channel: its wall time, or a negative errno when it did not
 * bring want bytes back at least. */
static int64_t tar_round(struct eph_sandbox *sb, uint64_t want)
{
    struct eph_exec_request req = {.command = "tar -cf - out",
                                   .timeout_ms = 60000,
                                   .stdout_cap = (uint32_t)(want + want / 8 + (4u << 20)),
                                   .stderr_cap = 4096};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    uint64_t t0 = eph_clock_mono_ns();
    int rc = eph_sandbox_exec(sb, &req, &res);
    uint64_t dt = eph_clock_mono_ns() - t0;
    if (!rc && (res.signal || res.exit_code != 0 || res.out.len < want ||
                res.out.len != res.stdout_total)) {
        fprintf(stderr, "bench_exec: tar: exit %d, %zu of %llu bytes kept\n", res.exit_code,
                res.out.len, (unsigned long long)res.stdout_total);
        rc = -EIO;
    }
    eph_exec_result_release(&res);
    return rc ? rc : (int64_t)dt;
}

static int64_t collect_round(struct eph_sandbox *sb, const json_t *patterns, long files,
                             uint64_t bytes)
{
    struct eph_outputs_result res;
    uint64_t t0 = eph_clock_mono_ns();
    int rc = eph_outputs_collect(sb, patterns, (unsigned)files, bytes, &res);
    uint64_t dt = eph_clock_mono_ns() - t0;
    if (rc)
        return rc;
    bool whole = res.got.n == (size_t)files && res.bytes == bytes && res.skipped_total == 0;
    if (!whole)
        fprintf(stderr, "bench_exec: outputs: %zu files, %llu bytes, %zu skipped\n", res.got.n,
                (unsigned long long)res.bytes, res.skipped_total);
    eph_outputs_result_release(&res);
    return whole ? (int64_t)dt : -EIO;
}

static int mode_outputs(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops *ops,
                        long files, long bytes, long reps)
{
    struct eph_sandbox *sb = NULL;
    int rc = ops->create(cfg, &sb);
    if (rc) {
        fprintf(stderr, "bench_exec: create: %s\n", eph_strerror(rc));
        return 1;
    }
    long each = bytes / files;
    uint64_t total = (uint64_t)each * (uint64_t)files;
    char make[256];
    snprintf(make, sizeof(make),
             "mkdir out && i=0; while [ $i -lt %ld ]; do head -c %ld /dev/urandom > out/f$i; "
             "i=$((i+1)); done",
             files, each);
    rc = one_exec(sb, make, NULL, NULL);
    json_t *patterns = json_pack("[s]", "out/**");
    uint64_t *col = calloc((size_t)reps + 1, sizeof(*col));
    uint64_t *tar = calloc((size_t)reps + 1, sizeof(*tar));
    if (!patterns || !col || !tar)
        rc = -ENOMEM;
    /* A warm-up of each (the page cache, the allocator), then the rounds, alternately. */
    if (!rc && (collect_round(sb, patterns, files, total) < 0 || tar_round(sb, total) < 0))
        rc = -EIO;
    double stop = now_s() + time_cap_s;
    long done = 0;
    for (; done < reps && !rc && now_s() < stop; done++) {
        int64_t c = collect_round(sb, patterns, files, total);
        int64_t t = c < 0 ? c : tar_round(sb, total);
        if (c < 0 || t < 0) {
            rc = (int)(c < 0 ? c : t);
            break;
        }
        col[done] = (uint64_t)c;
        tar[done] = (uint64_t)t;
    }
    if (rc)
        fprintf(stderr, "bench_exec: outputs: %s\n", eph_strerror(rc));
    int drc = eph_sandbox_destroy(sb);
    if (!rc)
        printf("{\"files\":%ld,\"bytes\":%llu,", files, (unsigned long long)total);
    if (!rc) {
        print_array_u64("collect_ns", col, (size_t)done, false);
        print_array_u64("tar_ns", tar, (size_t)done, true);
        printf("}\n");
    }
    json_decref(patterns);
    free(col);
    free(tar);
    return rc || drc ? 1 : 0;
}

/* --server-like: this process made to look like a running server to a clone (measured on an idle
 * `ephemerald serve`: 77 threads, 15 MB resident): threads parked on a lock, heap written. */
#define SERVER_THREADS 76
#define SERVER_HEAP_MIB 16

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;

static void *parked(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&park_lock); /* held by main for the whole run */
    pthread_mutex_unlock(&park_lock);
    return NULL;
}

static int become_server_like(void)
{
    pthread_mutex_lock(&park_lock);
    for (int i = 0; i < SERVER_THREADS; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, parked, NULL) != 0)
            return -1;
        pthread_detach(t);
    }
    char *heap = malloc((size_t)SERVER_HEAP_MIB << 20);
    if (!heap)
        return -1;
    memset(heap, 1, (size_t)SERVER_HEAP_MIB << 20); /* resident, as a server's heap is */
    return 0;
}

int main(int argc, char **argv)
{
    bool server_like = false, launcher = false;
    struct eph_sandbox_config cfg = {.backend = "namespaces", .owner_tag = "bench"};
    eph_sandbox_limits_default(&cfg.limits);
    cfg.image = eph_default_image_path();
    cfg.init_path = NULL;
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
        if (strcmp(argv[i], "--backend") == 0)
            cfg.backend = argv[i + 1];
        else if (strcmp(argv[i], "--image") == 0)
            cfg.image = argv[i + 1];
        else if (strcmp(argv[i], "--init") == 0)
            cfg.init_path = argv[i + 1];
        else if (strcmp(argv[i], "--server-like") == 0)
            server_like = strcmp(argv[i + 1], "yes") == 0;
        else if (strcmp(argv[i], "--launcher") == 0)
            launcher = strcmp(argv[i + 1], "yes") == 0;
        else {
            usage();
            return 2;
        }
    }
    if (i >= argc) {
        usage();
        return 2;
    }
    const char *cap = getenv("BENCH_TIME_CAP_S");
    if (cap && atof(cap) > 0)
        time_cap_s = atof(cap);
    (void)eph_log_configure(EPH_LOG_WARN, "text");
    if (!cfg.init_path) {
        fprintf(stderr, "bench_exec: --init PATH is required\n");
        return 2;
    }
    char why[512];
    const struct eph_sandbox_ops *ops = NULL;
    int rc = eph_sandbox_choose(&cfg, &ops, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "bench_exec: %s\n", why);
        return 1;
    }
    /* As `serve` does: the launcher first, while this process is small and has one thread. */
    if (launcher && (rc = eph_sandbox_launcher_start())) {
        fprintf(stderr, "bench_exec: launcher: %s\n", eph_strerror(rc));
        return 1;
    }
    if (server_like && become_server_like()) {
        fprintf(stderr, "bench_exec: cannot look like a server\n");
        return 1;
    }
    const char *mode = argv[i];
    long n = i + 1 < argc ? parse_count(argv[i + 1], MAX_N) : -1;
    long warmup = i + 2 < argc ? parse_count(argv[i + 2], MAX_N) : 0;
    if (strcmp(mode, "exec") == 0 && n > 0 && warmup >= 0 && i + 3 < argc)
        return mode_exec(&cfg, ops, n, warmup, argv[i + 3]);
    bool start = strcmp(mode, "start") == 0, pool = strcmp(mode, "pool") == 0;
    long gap_ms = (start || pool) && i + 3 < argc ? parse_count(argv[i + 3], 10000) : 0;
    if ((start || pool) && n > 0 && warmup >= 0 && gap_ms >= 0)
        return mode_start(&cfg, ops, n, warmup, gap_ms, pool);
    if (strcmp(mode, "density") == 0 && n > 0 && n <= MAX_DENSITY)
        return mode_density(&cfg, ops, n);
    long reps = i + 3 < argc ? parse_count(argv[i + 3], MAX_N) : -1;
    if (strcmp(mode, "outputs") == 0 && n > 0 && n <= 10000 && i + 2 < argc &&
        parse_count(argv[i + 2], 1L << 30) >= n && reps > 0)
        return mode_outputs(&cfg, ops, n, parse_count(argv[i + 2], 1L << 30), reps);
    usage();
    return 2;
}
