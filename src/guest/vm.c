/*
 * vm.c - ephemeral-init as the first process of a microVM. See vm.h.
 *
 * The kernel runs /init of the initramfs the host assembled (src/sandbox/microvm/microvm.c):
 *
 *   /init                  this program
 *   /modules/NN-name.ko    the kernel modules the guest needs that the kernel does not build in
 *                          (virtio transport, block and console for Debian's cloud kernel),
 *                          loaded in name order
 *   /dev /proc /sys /newroot   empty mount points
 *
 * Nothing here trusts the host less than the rest of init does, but nothing here runs after a
 * command has: by the time worker code runs, this process is the sandbox's keeper (harden.h:
 * effective uid 1000, no capability, the seccomp filter), and every mount is in place. The VM is
 * the boundary; these steps only give the commands the same view of the machine as the other
 * backends give them (read-only image, private /tmp, minimal /dev, no network, no privilege).
 *
 * Parked for a snapshot (ephemeral.park=1 on the command line; docs/SANDBOX.md, "MicroVM
 * snapshots"): the expensive half of the boot (the kernel, the modules, the devices, the root disk
 * mounted, the channel open) is done once; init then says "parked" on the channel and waits. The
 * host saves the machine there and starts later VMs by restoring it; the first thing a restored
 * guest reads is the resume line the host wrote for it, words like the kernel command line's: the
 * run's parameters, and what must differ between clones of one saved machine (entropy for the
 * kernel's random pool, the wall clock, a boot id). The rest of the setup then runs as in a boot.
 *
 * Failures: a message on the kernel log (the console the host keeps) and a restart, which ends
 * the VM because QEMU runs with -no-reboot. The host sees the channel close and reports it.
 */
#include "guest/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "guest/protocol.h"

#define CHANNEL_FD 3
#define CHANNEL_NAME "ephemeral"
#define WORKER_ID 1000
#define NEWROOT "/newroot"
#define MODULES_DIR "/modules"
#define ROOT_DEV "/dev/vda"
/* How long the devices (disk, port) and the host's end of the port get to show up. Module
 * loading and the virtio handshakes are done long before this even under software emulation. */
#define DEVICE_WAIT_MS 20000
#define CMDLINE_MAX 4096
#define RUN_PREFIX "/tmp/ephemeral-run-"
#define SEED_BYTES 32
#define BOOT_ID_FILE "/boot_id" /* in the initramfs: out of reach once the root is switched */
#define BOOT_ID_PROC NEWROOT "/proc/sys/kernel/random/boot_id"

static char cmdline[CMDLINE_MAX];
static char run_dir[64], scratch[80], home[80];
static char *init_argv[5];

bool eph_guest_vm_started_by_kernel(int argc)
{
    return getpid() == 1 && argc <= 1;
}

/* The kernel log is the only output a VM without a terminal has; the host keeps the console. */
static void __attribute__((format(printf, 1, 2))) klog(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n = snprintf(line, sizeof(line), "<3>ephemeral-init: ");
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t w;
        do
            w = write(fd, line, (size_t)n);
        while (w < 0 && errno == EINTR);
        close(fd);
    }
}

static void __attribute__((noreturn, format(printf, 1, 2))) fatal(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    klog("%s; stopping the VM", msg);
    reboot(RB_AUTOBOOT);
    _exit(1); /* PID 1 exiting panics the kernel, which (panic=-1) restarts it: the same end */
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                     const char *data)
{
    if (mount(src, dst, type, flags, data) != 0)
        fatal("cannot mount %s on %s: %s",
              type  ? type
              : src ? src
                    : "(remount)",
              dst, strerror(errno));
}

/* ---- the command line ------------------------------------------------------------------ */

static void cmdline_read(void)
{
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fatal("cannot read /proc/cmdline: %s", strerror(errno));
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, cmdline + len, sizeof(cmdline) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof(cmdline) - 1)
            break;
    }
    close(fd);
    cmdline[len] = '\0';
    cmdline[strcspn(cmdline, "\n")] = '\0';
}

/* The value of "key=value" on the command line (copied into out), or NULL. */
static const char *cmdline_get(const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    for (const char *p = cmdline; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t v = n - klen - 1;
            if (v >= cap)
                return NULL;
            memcpy(out, p + klen + 1, v);
            out[v] = '\0';
            return out;
        }
        p += n;
    }
    return NULL;
}

static uint64_t cmdline_number(const char *key, uint64_t min, uint64_t max)
{
    char v[32], *end;
    if (!cmdline_get(key, v, sizeof(v)))
        fatal("no %s= on the command line", key);
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max)
        fatal("bad %s=%s on the command line", key, v);
    return (uint64_t)n;
}

/* ---- kernel modules -------------------------------------------------------------------- */

/* Module names treat '-' and '_' alike. */
static bool modname_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++) {
        char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
        if (x != y)
            return false;
    }
    return true;
}

/* The "name.param=value" words of the command line, as the module's "param=value ..." string:
 * what modprobe would pass (the kernel itself only applies them to built-in code). QEMU's
 * microvm machine describes its virtio-mmio devices this way when it does not use ACPI. */
static void module_params(const char *name, size_t nlen, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = cmdline; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        const char *dot = memchr(p, '.', n);
        if (dot && modname_eq(p, (size_t)(dot - p), name, nlen) &&
            memchr(dot, '=', n - (size_t)(dot - p))) {
            size_t plen = n - (size_t)(dot - p) - 1;
            if (used + plen + 2 < cap) {
                if (used)
                    out[used++] = ' ';
                memcpy(out + used, dot + 1, plen);
                used += plen;
                out[used] = '\0';
            }
        }
        p += n;
    }
}

static void modules_load(void)
{
    struct dirent **ents;
    int n = scandir(MODULES_DIR, &ents, NULL, alphasort);
    if (n < 0)
        return; /* a kernel that builds everything in needs no modules */
    for (int i = 0; i < n; i++) {
        const char *file = ents[i]->d_name;
        size_t len = strlen(file);
        if (len < 4 || strcmp(file + len - 3, ".ko") != 0) {
            free(ents[i]);
            continue;
        }
        /* "NN-name.ko": the order prefix and the suffix are not part of the name. */
        const char *name = strchr(file, '-') ? strchr(file, '-') + 1 : file;
        size_t nlen = (size_t)(file + len - 3 - name);
        char path[300], params[1024];
        snprintf(path, sizeof(path), MODULES_DIR "/%s", file);
        module_params(name, nlen, params, sizeof(params));
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            fatal("cannot open module %s: %s", path, strerror(errno));
        if (syscall(SYS_finit_module, fd, params, 0) != 0 && errno != EEXIST)
            fatal("cannot load module %s: %s", path, strerror(errno));
        close(fd);
        /* The initramfs stays in memory for the VM's life: free what is no longer needed. */
        unlink(path);
        free(ents[i]);
    }
    free(ents);
}

/* ---- devices --------------------------------------------------------------------------- */

/* The /dev node of the virtio-serial port named CHANNEL_NAME, once the host has named it. */
static bool find_port(char *dev, size_t cap)
{
    DIR *d = opendir("/sys/class/virtio-ports");
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) > 64)
            continue;
        char path[128], name[64];
        snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, name, sizeof(name) - 1);
        close(fd);
        if (r <= 0)
            continue;
        name[r] = '\0';
        name[strcspn(name, "\n")] = '\0';
        if (strcmp(name, CHANNEL_NAME) == 0) {
            snprintf(dev, cap, "/dev/%s", e->d_name);
            found = access(dev, F_OK) == 0;
        }
    }
    closedir(d);
    return found;
}

/* Opens the channel as fd 3 once the host's end is connected: the port reports a hangup until
 * then, and init takes a hangup for the host going away. */
static void channel_open(uint64_t deadline)
{
    char dev[96];
    while (!find_port(dev, sizeof(dev))) {
        if (mono_ms() > deadline)
            fatal("no virtio-serial port named '" CHANNEL_NAME "'");
        pause_ms(5);
    }
    int fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        fatal("cannot open %s: %s", dev, strerror(errno));
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) >= 0 && !(pfd.revents & POLLHUP))
            break;
        if (mono_ms() > deadline)
            fatal("the host end of %s is not connected", dev);
        pause_ms(5);
    }
    if (fd != CHANNEL_FD) {
        if (dup2(fd, CHANNEL_FD) < 0)
            fatal("dup2: %s", strerror(errno));
        close(fd);
    }
}

static void wait_for(const char *path, uint64_t deadline)
{
    while (access(path, F_OK) != 0) {
        if (mono_ms() > deadline)
            fatal("%s did not appear", path);
        pause_ms(5);
    }
}

/* ---- the new root ---------------------------------------------------------------------- */

/* The same minimal /dev the namespaces jail builds (src/sandbox/namespaces/mount.c), with the
 * device nodes made rather than bound from a host. */
static void newroot_dev(void)
{
    static const struct {
        const char *name;
        unsigned major, minor;
    } nodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                 {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
    static const char *const links[][2] = {
        {"/proc/self/fd", "fd"},       {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
        {"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"},
    };
    do_mount("tmpfs", NEWROOT "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
             "size=64k,nr_inodes=64,mode=0755");
    int dfd = open(NEWROOT "/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        fatal("cannot open the new /dev: %s", strerror(errno));
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        if (mknodat(dfd, nodes[i].name, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)) ||
            fchmodat(dfd, nodes[i].name, 0666, 0))
            fatal("cannot make /dev/%s: %s", nodes[i].name, strerror(errno));
    }
    if (mkdirat(dfd, "pts", 0755) || mkdirat(dfd, "shm", 01777) || fchmodat(dfd, "shm", 01777, 0))
        fatal("cannot make /dev/pts, /dev/shm: %s", strerror(errno));
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlinkat(links[i][0], dfd, links[i][1]) != 0)
            fatal("cannot link /dev/%s: %s", links[i][1], strerror(errno));
    close(dfd);
    do_mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=0620");
    do_mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
             "size=64m,nr_inodes=4096,mode=1777");
    /* Nothing may be added to /dev once it is built. */
    do_mount(NULL, NEWROOT "/dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
             "size=64k,nr_inodes=64,mode=0755");
}

static void newroot_tmp(unsigned disk_mib)
{
    char opts[96];
    /* Inodes scale with the size, as in the jail. */
    snprintf(opts, sizeof(opts), "size=%um,nr_inodes=%u,mode=1777", disk_mib,
             disk_mib * 64u < 4096u ? 4096u : disk_mib * 64u);
    do_mount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts);
    char path[128];
    snprintf(path, sizeof(path), NEWROOT "%s", run_dir);
    if (mkdir(path, 0755) != 0)
        fatal("cannot make %s: %s", run_dir, strerror(errno));
    snprintf(path, sizeof(path), NEWROOT "%s", scratch);
    if (mkdir(path, 0755) != 0 || chown(path, WORKER_ID, WORKER_ID) != 0)
        fatal("cannot make %s: %s", scratch, strerror(errno));
    snprintf(path, sizeof(path), NEWROOT "%s", home);
    if (mkdir(path, 0700) != 0 || chown(path, WORKER_ID, WORKER_ID) != 0)
        fatal("cannot make %s: %s", home, strerror(errno));
}

/* Moves the new root over / and enters it. The initramfs stays underneath, out of reach: worker
 * has no capability to chroot back out and no descriptor pointing there. */
static void switch_root(void)
{
    unlink("/init"); /* the running image stays in memory; the file is not needed */
    if (umount2("/sys", MNT_DETACH) || umount2("/proc", MNT_DETACH) || umount2("/dev", MNT_DETACH))
        fatal("cannot unmount the initramfs's file systems: %s", strerror(errno));
    if (chdir(NEWROOT) != 0)
        fatal("chdir %s: %s", NEWROOT, strerror(errno));
    do_mount(".", "/", NULL, MS_MOVE, NULL);
    if (chroot(".") != 0 || chdir("/") != 0)
        fatal("cannot enter the new root: %s", strerror(errno));
}

/* ---- a restored snapshot --------------------------------------------------------------- */

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Says "parked" and waits for the host's resume line, which then stands in for the kernel's
 * command line (cmdline_get reads it). One byte at a time: nothing after its newline is taken
 * from the channel, which is init.c's from then on. A machine saved here is restored here: this
 * read is where every clone starts. */
static void park(void)
{
    static const char parked[] = EPH_PROTO_VM_PARKED;
    ssize_t w;
    do
        w = write(CHANNEL_FD, parked, sizeof(parked) - 1);
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)sizeof(parked) - 1)
        fatal("cannot say parked: %s", w < 0 ? strerror(errno) : "short write");
    size_t len = 0;
    for (;;) {
        char c;
        ssize_t n = read(CHANNEL_FD, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* No host at the other end (between the save and a restore): wait for one. */
            pause_ms(5);
            continue;
        }
        if (c == '\n')
            break;
        if (len == EPH_PROTO_VM_RESUME_MAX - 1)
            fatal("the resume line is too long");
        cmdline[len++] = c;
    }
    cmdline[len] = '\0';
    if (strncmp(cmdline, EPH_PROTO_VM_RESUME_WORD " ", strlen(EPH_PROTO_VM_RESUME_WORD) + 1) != 0)
        fatal("the host's first line is not a resume line");
}

/* What must differ between two VMs restored from one saved machine, before anything uses it:
 * the host's random bytes credited to the kernel's pool and the pool reseeded (the saved pool is
 * every clone's), the wall clock stepped (it stood still in the file), and a boot id of its own
 * (the kernel's would be made from the saved pool, or was made before the save). */
static void clone_unique(void)
{
    char hex[2 * SEED_BYTES + 1], when[40], boot_id[40];
    if (!cmdline_get("ephemeral.seed", hex, sizeof(hex)) || strlen(hex) != 2 * SEED_BYTES)
        fatal("no valid ephemeral.seed= in the resume line");
    struct {
        struct rand_pool_info info;
        uint8_t bytes[SEED_BYTES];
    } seed = {.info = {.entropy_count = 8 * SEED_BYTES, .buf_size = SEED_BYTES}};
    for (size_t i = 0; i < SEED_BYTES; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            fatal("bad ephemeral.seed= in the resume line");
        seed.bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &seed) != 0 || ioctl(fd, RNDRESEEDCRNG) != 0)
        fatal("cannot reseed the kernel's random pool: %s", strerror(errno));
    close(fd);
    explicit_bzero(&seed, sizeof(seed));
    explicit_bzero(hex, sizeof(hex));
    /* The seed is not kept in the command line either. */
    char *word = strstr(cmdline, "ephemeral.seed=");
    if (word)
        memset(word + strlen("ephemeral.seed="), '0', 2 * SEED_BYTES);

    char *end;
    if (!cmdline_get("ephemeral.time", when, sizeof(when)))
        fatal("no ephemeral.time= in the resume line");
    errno = 0;
    unsigned long long ns = strtoull(when, &end, 10);
    if (errno || end == when || *end)
        fatal("bad ephemeral.time=%s in the resume line", when);
    struct timespec now = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    if (clock_settime(CLOCK_REALTIME, &now) != 0)
        fatal("cannot set the clock: %s", strerror(errno));

    if (!cmdline_get("ephemeral.boot_id", boot_id, sizeof(boot_id)) || strlen(boot_id) != 36 ||
        strspn(boot_id, "0123456789abcdef-") != 36)
        fatal("no valid ephemeral.boot_id= in the resume line");
    boot_id[36] = '\n';
    fd = open(BOOT_ID_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd < 0 || write(fd, boot_id, 37) != 37)
        fatal("cannot write %s: %s", BOOT_ID_FILE, strerror(errno));
    close(fd);
}

/* The new /proc's boot_id is the clone's own: the file written above, bound read-only over it. */
static void boot_id_bind(void)
{
    do_mount(BOOT_ID_FILE, BOOT_ID_PROC, NULL, MS_BIND, NULL);
    do_mount(NULL, BOOT_ID_PROC, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
             NULL);
}

/* ---- the machine ----------------------------------------------------------------------- */

/* Only lo exists (the VM has no network device); up, so that programs can talk to themselves. */
static void loopback_up(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        klog("no loopback: %s", strerror(errno));
        return;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
            klog("cannot bring lo up: %s", strerror(errno));
    }
    close(fd);
}

/* No user namespace in this kernel at all, a second wall behind the seccomp filter's clone and
 * unshare rules: the guest kernel is the sandbox's own (under the other backends the kernel is
 * not: the filter alone refuses them). */
static void userns_off(void)
{
    int fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        fatal("cannot open user.max_user_namespaces: %s", strerror(errno));
    if (write(fd, "0\n", 2) != 2)
        fatal("cannot set user.max_user_namespaces to 0: %s", strerror(errno));
    close(fd);
}

static void set_limit(int resource, uint64_t v, const char *name)
{
    struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
    if (setrlimit(resource, &rl) != 0)
        fatal("setrlimit %s: %s", name, strerror(errno));
}

char **eph_guest_vm_setup(void)
{
    /* The kernel gives init a console on 0-2 only when the initramfs has /dev/console. */
    mkdir("/dev", 0755);
    mkdir("/proc", 0755);
    mkdir("/sys", 0755);
    do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755");
    do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) >= 0)
            continue;
        int null = open("/dev/null", O_RDWR);
        if (null >= 0 && null != fd) {
            dup2(null, fd);
            close(null);
        }
    }

    cmdline_read();
    char v[64];
    if (!cmdline_get("ephemeral.mode", v, sizeof(v)) || strcmp(v, "vm") != 0)
        fatal("started as the kernel's init without ephemeral.mode=vm");
    bool parked = cmdline_get("ephemeral.park", v, sizeof(v)) && strcmp(v, "1") == 0;

    uint64_t deadline = mono_ms() + DEVICE_WAIT_MS;
    modules_load();
    wait_for(ROOT_DEV, deadline);
    mkdir(NEWROOT, 0755);
    /* The disk is read-only at the device too (QEMU's read-only=on); no journal to replay. */
    do_mount(ROOT_DEV, NEWROOT, "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV, "noload");
    if (parked) {
        channel_open(deadline);
        park(); /* a restored VM continues here, with the resume line as its command line */
        clone_unique();
    }

    /* The run's parameters: from the kernel's command line, or from the resume line. */
    if (!cmdline_get("ephemeral.run", run_dir, sizeof(run_dir)) ||
        strncmp(run_dir, RUN_PREFIX, strlen(RUN_PREFIX)) != 0 ||
        strlen(run_dir) != strlen(RUN_PREFIX) + 6 ||
        strspn(run_dir + strlen(RUN_PREFIX),
               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != 6)
        fatal("no valid ephemeral.run= on the command line");
    snprintf(scratch, sizeof(scratch), "%s/scratch", run_dir);
    snprintf(home, sizeof(home), "%s/home", run_dir);
    unsigned disk_mib = (unsigned)cmdline_number("ephemeral.disk_mib", 1, 1u << 20);
    uint64_t nofile = cmdline_number("ephemeral.nofile", 16, 1u << 20);
    uint64_t fsize = cmdline_number("ephemeral.fsize", 1, UINT64_MAX / 2);
    uint64_t nproc = cmdline_number("ephemeral.nproc", 8, 1u << 22);

    newroot_tmp(disk_mib);
    do_mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    if (parked)
        boot_id_bind();
    newroot_dev();
    if (!parked)
        channel_open(deadline);
    switch_root();

    /* Only 0-2 and the channel cross into the sandbox. */
    for (int fd = CHANNEL_FD + 1; fd < 1024; fd++)
        close(fd);
    if (sethostname("sandbox", 7) != 0)
        klog("sethostname: %s", strerror(errno));
    loopback_up();
    set_limit(RLIMIT_NOFILE, nofile, "NOFILE");
    set_limit(RLIMIT_FSIZE, fsize, "FSIZE");
    set_limit(RLIMIT_CORE, 0, "CORE");
    userns_off();
    /* worker's processes in this VM: the VM's process limit (the keeper's real uid is 0, which
     * it does not count). */
    set_limit(RLIMIT_NPROC, nproc, "NPROC");
    umask(022);
    /* Still root: init.c makes this process the keeper (guest/harden.c) before it serves. */

    init_argv[0] = "ephemeral-init";
    init_argv[1] = "--keeper";
    init_argv[2] = scratch;
    init_argv[3] = home;
    init_argv[4] = NULL;
    return init_argv;
}
