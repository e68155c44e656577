/*
 * microvm.c - the microvm backend: one QEMU microvm machine per sandbox. See microvm.h.
 *
 * create:
 *
 *   1. names: <tag>-<server pid>-vm<n> for the cgroup and QEMU's -name, and the run directory
 *      /tmp/ephemeral-run-XXXXXX that the guest makes in its own tmpfs;
 *   2. a cgroup (memory = guest + QEMU, pids, CPU) through the namespaces backend's cgroup module,
 *      and a host uid of a range no host user owns, one per live VM;
 *   3. a socketpair: the server keeps one end, QEMU gets the other as `-chardev socket,fd=3`,
 *      behind the virtio-serial port named "ephemeral";
 *   4. QEMU forked and exec'd with, in this order in the child: the cgroup, its own session,
 *      rlimits, exactly fds 0-6 (null, console, console, channel, initramfs, and the kernel and
 *      root disk, opened by the server: the image cache is root's alone), an empty capability
 *      bounding set, the uid, no_new_privs, PR_SET_PDEATHSIG (last: a uid change clears it);
 *      then QEMU installs its own seccomp filter (-sandbox) before it runs the guest;
 *   5. the guest's hello (it has booted, mounted everything and become worker).
 *
 * Restored, not booted (docs/SANDBOX.md, "MicroVM snapshots"): step 4 is QEMU started with
 * `-incoming fd:7` on the saved machine of this image and shape (snapshot.h), and the first thing
 * the server writes on the channel is the resume line the parked guest waits for. The first
 * create of a shape saves the machine (a boot with ephemeral.park=1 and a monitor on fd 7, inside
 * that sandbox's cgroup and uid); a restore that fails removes the file and boots instead.
 *
 * The initramfs (cpio newc: /init = ephemeral-init, /modules/NN-name.ko from the kernel's cache
 * directory) is assembled once per process into a sealed memory file and shared by every QEMU.
 * The console (the guest kernel's log, QEMU's own messages) is a memory file too, capped by QEMU's
 * RLIMIT_FSIZE; its tail is logged when a boot fails.
 *
 * destroy asks the guest to shut down (init kills everything and exits, the guest kernel restarts
 * and QEMU, run with -no-reboot, exits), closes the channel, gives QEMU a short grace, SIGKILLs it,
 * reaps it, and removes the cgroup. interrupt (any thread) shuts the channel down and SIGKILLs
 * QEMU. Orphans of dead servers are their cgroups (killing what is listed kills their QEMU).
 */
#include "sandbox/microvm/microvm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "common/fileio.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "common/text.h"
#include "sandbox/backend.h"
#include "sandbox/hostid.h"
#include "sandbox/microvm/snapshot.h"
#include "sandbox/namespaces/namespaces.h"
#include "sandbox/program.h"

#define COMPONENT "sandbox"
#define QEMU_NAME "qemu-system-x86_64"
#define SPAWN_PATH EPH_SANDBOX_SPAWN_PATH
#define ALLOW_TCG_ENV "EPHEMERAL_MICROVM_ALLOW_TCG"
/* "0": every microVM boots (no saved machine is made or restored). */
#define SNAPSHOTS_ENV "EPHEMERAL_MICROVM_SNAPSHOTS"
/* Host uids of QEMU processes: a range no host user owns (below the namespaces backend's), one
 * per live VM on the host, whichever server started it (a lease, sandbox/hostid.h), so that no
 * two VMs' processes can signal or trace each other. */
#define HOST_ID_BASE 0x7d000000u
#define HOST_IDS 65536u
/* The fds QEMU is given, by number (its command line names them). The kernel and the root disk
 * are opened by the server (root) and handed over: the image cache is root's alone (0700), so
 * QEMU's uid could not open them by their paths. */
#define FD_CHANNEL 3
#define FD_INITRD 4
#define FD_KERNEL 5
#define FD_DISK 6
/* The saving QEMU's monitor (a socketpair), or the saved machine a QEMU restores. */
#define FD_EXTRA 7
/* Boots: KVM takes well under a second; software emulation several seconds, more when the host
 * is busy with other emulated VMs. */
#define BOOT_TIMEOUT_KVM_MS 15000u
#define BOOT_TIMEOUT_TCG_MS 90000u
/* After the guest said it is shutting down (or the channel closed), how long QEMU gets to exit
 * on its own before it is killed. */
#define EXIT_GRACE_MS 3000u
#define CONSOLE_CAP (1u << 20)
#define INITRD_CAP (64u << 20)
#define TCG_TB_MIB 64u

/* The watched process is QEMU. */
struct vm_sandbox {
    struct eph_guest_sandbox g; /* first: the generic layer casts */
    struct eph_ns_cgroup cg;
    struct eph_hostid_lease uid; /* QEMU's host uid */
    int console_fd;              /* memfd: QEMU's stdout and stderr */
    int accel;                   /* enum accel */
    bool probing;                /* a failed boot is an answer, not an error */
};

/* ---- small helpers --------------------------------------------------------------------- */

/* The last line of the console that says something, cleaned for a log line. */
static void console_tail(int fd, char *out, size_t cap)
{
    char buf[2048];
    out[0] = '\0';
    if (fd < 0)
        return;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
    if (n <= 0)
        return;
    buf[n] = '\0';
    /* The lines that matter are init's reason or QEMU's error; the kernel's panic trace (init's
     * ordinary exit) is not. */
    char *pick = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(line, "ephemeral-init:") || strstr(line, "qemu-system") ||
            strstr(line, "Kernel panic") || strstr(line, "VFS:"))
            pick = line;
        line = nl ? nl + 1 : NULL;
    }
    if (!pick)
        return;
    size_t j = 0;
    for (size_t i = 0; pick[i] && j + 1 < cap; i++)
        out[j++] = (pick[i] >= 0x20 && pick[i] < 0x7f) ? pick[i] : '?';
    out[j] = '\0';
}

/* ---- host resources: paths, QEMU, KVM, uids --------------------------------------------- */

struct vm_paths {
    char kernel[PATH_MAX];  /* vmlinuz */
    char modules[PATH_MAX]; /* directory of NN-name.ko */
    char disk[PATH_MAX];    /* root.img */
    char snapdir[PATH_MAX]; /* saved machines */
};

/* <image> is <cache>/images/<key>/rootfs (or a link to it); the VM pieces are beside it. */
static int paths_find(const struct eph_sandbox_config *cfg, struct vm_paths *p, char *why,
                      size_t whylen)
{
    char root[PATH_MAX], dir[PATH_MAX], marker[PATH_MAX + 32];
    if (!cfg->image || !realpath(cfg->image, root)) {
        snprintf(why, whylen, "sandbox image '%s' not found", cfg->image ? cfg->image : "");
        return -ENOENT;
    }
    char *slash = strrchr(root, '/');
    if (!slash || slash == root) {
        snprintf(why, whylen, "sandbox image '%s' is not in an image cache directory", root);
        return -ENOENT;
    }
    *slash = '\0';
    snprintf(dir, sizeof(dir), "%.4000s/microvm", root);
    snprintf(marker, sizeof(marker), "%s/complete", dir);
    if (access(marker, R_OK) != 0) {
        snprintf(why, whylen,
                 "no microvm kernel and root disk beside the image in '%s' (make image builds "
                 "them)",
                 dir);
        return -ENOENT;
    }
    snprintf(p->kernel, sizeof(p->kernel), "%.4000s/kernel/vmlinuz", dir);
    snprintf(p->modules, sizeof(p->modules), "%.4000s/kernel/modules", dir);
    snprintf(p->disk, sizeof(p->disk), "%.4000s/root.img", dir);
    snprintf(p->snapdir, sizeof(p->snapdir), "%.4000s/snapshots", dir);
    if (access(p->kernel, R_OK) != 0 || access(p->disk, R_OK) != 0) {
        snprintf(why, whylen, "the microvm kernel or root disk in '%s' is missing (make image)",
                 dir);
        return -ENOENT;
    }
    return 0;
}

static pthread_once_t qemu_once = PTHREAD_ONCE_INIT;
static char qemu_path[PATH_MAX];

static void qemu_find(void)
{
    eph_sandbox_find_program("EPHEMERAL_QEMU", QEMU_NAME, qemu_path, sizeof(qemu_path));
}

static const char *qemu(void)
{
    pthread_once(&qemu_once, qemu_find);
    return qemu_path[0] ? qemu_path : NULL;
}

/* /dev/kvm answers as KVM does (its presence alone says nothing: see the probe). */
static int kvm_present(char *why, size_t whylen)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "cannot open /dev/kvm: %s", strerror(errno));
        return -errno;
    }
    int v = ioctl(fd, KVM_GET_API_VERSION, 0);
    close(fd);
    if (v != KVM_API_VERSION) {
        snprintf(why, whylen, "/dev/kvm does not answer as KVM does (API version %d)", v);
        return -ENODEV;
    }
    return 0;
}

/* The host TSC rate in kHz, measured against the monotonic clock. Under TCG the guest's TSC is
 * the host's, and the guest kernel cannot calibrate it reliably against an emulated PIT on a busy
 * host (it then hangs in early boot): it is told the rate instead (tsc_early_khz). */
static unsigned long tsc_khz(void)
{
    static unsigned long khz;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!khz) {
        struct timespec a, b, pause = {0, 50 * 1000 * 1000};
        clock_gettime(CLOCK_MONOTONIC_RAW, &a);
        uint64_t t0 = __rdtsc();
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
        uint64_t t1 = __rdtsc();
        clock_gettime(CLOCK_MONOTONIC_RAW, &b);
        uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec -
                      (uint64_t)a.tv_nsec;
        khz = ns ? (unsigned long)((t1 - t0) * 1000000u / ns) : 0;
    }
    unsigned long v = khz;
    pthread_mutex_unlock(&lock);
    return v;
}

/* ---- the initramfs ------------------------------------------------------------------------ */

/* One cpio "newc" entry (header, name, padding, data, padding) appended to b. */
static int cpio_add(struct eph_buf *b, const char *name, unsigned mode, const void *data,
                    size_t len, unsigned ino)
{
    static const char zeros[4] = {0};
    char hdr[111];
    size_t nlen = strlen(name) + 1;
    /* newc sizes are eight hex digits: a bigger entry cannot be written. */
    if (len > 0xffffffffu || nlen > 0xffffffffu)
        return -EFBIG;
    int rc = eph_text_format(
        hdr, sizeof(hdr), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ino, mode,
        0u, 0u, 1u, 0u, (unsigned)len, 0u, 0u, 0u, 0u, (unsigned)nlen, 0u);
    if (!rc)
        rc = eph_buf_append(b, hdr, 110);
    if (!rc)
        rc = eph_buf_append(b, name, nlen);
    if (!rc)
        rc = eph_buf_append(b, zeros, (4 - (110 + nlen) % 4) % 4);
    if (!rc && len)
        rc = eph_buf_append(b, data, len);
    if (!rc)
        rc = eph_buf_append(b, zeros, (4 - len % 4) % 4);
    return rc;
}

static int cpio_add_file(struct eph_buf *b, const char *name, const char *path, unsigned mode,
                         unsigned ino)
{
    struct eph_buf data;
    eph_buf_init(&data, INITRD_CAP);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char chunk[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0)
                rc = -errno;
            break;
        }
        if ((rc = eph_buf_append(&data, chunk, (size_t)n)))
            break;
    }
    close(fd);
    if (!rc)
        rc = cpio_add(b, name, mode, data.data, data.len, ino);
    eph_buf_release(&data);
    return rc;
}

static pthread_mutex_t initrd_lock = PTHREAD_MUTEX_INITIALIZER;
static int initrd_fd = -1;
static char initrd_key[2 * PATH_MAX + 8];

/* The initramfs for (init, modules) as a sealed memory file; built once, then shared. Returns a
 * descriptor the caller must not close, or a negative errno. */
static int initrd_get(const char *init_path, const char *modules)
{
    char key[sizeof(initrd_key)];
    snprintf(key, sizeof(key), "%s\n%s", init_path, modules);
    pthread_mutex_lock(&initrd_lock);
    if (initrd_fd >= 0 && strcmp(key, initrd_key) == 0) {
        int fd = initrd_fd;
        pthread_mutex_unlock(&initrd_lock);
        return fd;
    }
    struct eph_buf b;
    eph_buf_init(&b, INITRD_CAP);
    static const char *const dirs[] = {"dev", "proc", "sys", "newroot", "modules"};
    unsigned ino = 1;
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof(dirs) / sizeof(dirs[0]); i++)
        rc = cpio_add(&b, dirs[i], 040755, NULL, 0, ino++);
    if (!rc && (rc = cpio_add_file(&b, "init", init_path, 0100755, ino++)))
        EPH_ERROR(COMPONENT, "cannot read ephemeral-init '%s': %s", init_path, strerror(-rc));
    struct dirent **ents = NULL;
    int n = rc ? 0 : scandir(modules, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        size_t len = strlen(name);
        if (!rc && len > 3 && strcmp(name + len - 3, ".ko") == 0 && len < 200) {
            char path[PATH_MAX + 256], inside[256];
            rc = eph_text_format(path, sizeof(path), "%s/%s", modules, name);
            if (!rc)
                rc = eph_text_format(inside, sizeof(inside), "modules/%s", name);
            if (!rc)
                rc = cpio_add_file(&b, inside, path, 0100644, ino++);
        }
        free(ents[i]);
    }
    free(ents);
    if (!rc)
        rc = cpio_add(&b, "TRAILER!!!", 0, NULL, 0, 0);
    int fd = -1;
    if (!rc) {
        fd = memfd_create("ephemeral-initrd", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
            rc = -errno;
    }
    if (!rc)
        rc = eph_fileio_write_all(fd, b.data, b.len);
    /* Sealed: a QEMU that could write to it would change every later VM's init. */
    if (!rc && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL))
        rc = -errno;
    eph_buf_release(&b);
    if (rc) {
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&initrd_lock);
        return rc;
    }
    if (initrd_fd >= 0)
        close(initrd_fd);
    initrd_fd = fd;
    snprintf(initrd_key, sizeof(initrd_key), "%s", key);
    pthread_mutex_unlock(&initrd_lock);
    return fd;
}

/* ---- QEMU -------------------------------------------------------------------------------- */

/* How a QEMU starts its guest: a boot; a boot to the parked point, with a monitor, to be saved; a
 * restore of the saved machine. */
enum vm_start { START_BOOT, START_PARK, START_RESTORE };

struct vm_launch {
    const char *argv[64];
    char mem[16], smp[16], tcg[32], name[80], chan[64], initrd[32], kernel[32], append[768];
    char machine[128];
    char drive[128];
    uint64_t fsize; /* RLIMIT_FSIZE: the console's cap, or the saved machine's */
    int cg_fds[3];  /* cgroup.procs of each of the sandbox's cgroup directories */
    int ncg;
    uid_t uid;
    gid_t gid;
    gid_t groups[1];
    int ngroups;
};

static int launch_prepare(struct vm_launch *L, const struct vm_sandbox *sb,
                          const struct vm_paths *p, const struct eph_sandbox_limits *l, bool kvm,
                          enum vm_start how)
{
    size_t n = 0;
    int len;
    /* KVM: kvmclock needs no legacy timer, and nothing else needs the legacy devices. TCG: the
     * guest kernel's timer setup needs the PIT and PIC, and without an RTC it waits over a
     * second, twice, for one. */
    snprintf(L->machine, sizeof(L->machine), "microvm,x-option-roms=off,isa-serial=off,%s",
             kvm ? "pit=off,pic=off,rtc=off" : "pit=on,pic=on,rtc=on");
    snprintf(L->mem, sizeof(L->mem), "%u", l->memory_mib + EPH_MICROVM_GUEST_EXTRA_MIB);
    /* The saving QEMU writes the guest's memory and its devices' state (a few MiB) into the
     * file; its guest has run nothing but init, so its console is the kernel's quiet boot. */
    L->fsize = how == START_PARK
                   ? ((uint64_t)l->memory_mib + EPH_MICROVM_GUEST_EXTRA_MIB + 64u) << 20
                   : CONSOLE_CAP;
    snprintf(L->smp, sizeof(L->smp), "%u", l->vcpus);
    snprintf(L->tcg, sizeof(L->tcg), "tcg,tb-size=%u", TCG_TB_MIB);
    snprintf(L->name, sizeof(L->name), "ephemeral-%s", sb->g.name);
    snprintf(L->chan, sizeof(L->chan), "socket,id=chan,fd=%d", FD_CHANNEL);
    snprintf(L->initrd, sizeof(L->initrd), "/proc/self/fd/%d", FD_INITRD);
    snprintf(L->kernel, sizeof(L->kernel), "/proc/self/fd/%d", FD_KERNEL);
    char tsc[64] = "";
    if (!kvm && tsc_khz() > 100000)
        snprintf(tsc, sizeof(tsc), " tsc_early_khz=%lu tsc=reliable", tsc_khz());
    /* A backstop behind the guest's own memory limit, a little above pids as in the jail. A
     * parked guest (and so a restored one) gets the run's parameters from the resume line. */
    if (how == START_BOOT)
        len = snprintf(L->append, sizeof(L->append),
                       "console=hvc0 quiet panic=-1 ephemeral.mode=vm ephemeral.run=%s "
                       "ephemeral.disk_mib=%u ephemeral.nofile=%u ephemeral.fsize=%llu "
                       "ephemeral.nproc=%u%s",
                       sb->g.run_dir, l->disk_mib, l->nofile, (unsigned long long)l->fsize_bytes,
                       l->pids + 16u, tsc);
    else
        len = snprintf(L->append, sizeof(L->append),
                       "console=hvc0 quiet panic=-1 ephemeral.mode=vm ephemeral.park=1%s", tsc);
    if (len < 0 || (size_t)len >= sizeof(L->append))
        return -ENAMETOOLONG;
    len = snprintf(L->drive, sizeof(L->drive),
                   "id=root,file=/proc/self/fd/%d,format=raw,if=none,read-only=on", FD_DISK);
    if (len < 0 || (size_t)len >= sizeof(L->drive))
        return -ENAMETOOLONG;
    const char *a[] = {
        qemu(),
        "-name",
        L->name,
        "-M",
        L->machine,
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-accel",
        kvm ? "kvm" : L->tcg,
        "-cpu",
        kvm ? "host" : "max",
        "-m",
        L->mem,
        "-smp",
        L->smp,
        "-kernel",
        L->kernel,
        "-initrd",
        L->initrd,
        "-append",
        L->append,
        /* The image, read-only at the device: the guest cannot write it even as root. */
        "-drive",
        L->drive,
        "-device",
        "virtio-blk-device,drive=root",
        "-device",
        "virtio-serial-device",
        /* The guest's console (hvc0): QEMU's stdout, a memory file the server reads on failure. */
        "-chardev",
        "stdio,id=con,signal=off",
        "-device",
        "virtconsole,chardev=con",
        "-chardev",
        L->chan,
        "-device",
        "virtserialport,chardev=chan,name=ephemeral",
        /* No network device at all (-nodefaults already adds none). */
        "-nic",
        "none",
        /* QEMU's own seccomp filter: no obsolete calls, no set*id, no fork/exec, no changes to
         * its own scheduling or resources. */
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-msg",
        "timestamp=off",
    };
    /* The saving QEMU's monitor; the restoring QEMU's saved machine. */
    static const char *const park[] = {"-chardev", "socket,id=mon,fd=7", "-mon",
                                       "chardev=mon,mode=control"};
    static const char *const restore[] = {"-incoming", "fd:7"};
    _Static_assert(FD_EXTRA == 7, "the command line names fd 7");
    const char *const *extra = how == START_PARK ? park : how == START_RESTORE ? restore : NULL;
    size_t nextra = how == START_PARK      ? sizeof(park) / sizeof(park[0])
                    : how == START_RESTORE ? sizeof(restore) / sizeof(restore[0])
                                           : 0;
    if (sizeof(a) / sizeof(a[0]) + nextra + 1 > sizeof(L->argv) / sizeof(L->argv[0]))
        return -E2BIG;
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        L->argv[n++] = a[i];
    for (size_t i = 0; i < nextra; i++)
        L->argv[n++] = extra[i];
    L->argv[n] = NULL;
    return 0;
}

/* The child between fork and exec: a copy of a possibly multithreaded server, so only
 * async-signal-safe calls and raw system calls (no malloc, no stdio, no glibc set*id). */
static void __attribute__((noreturn))
qemu_child(const struct vm_launch *L, pid_t parent, int null_fd, int console_fd, int chan_fd,
           int initrd, int kernel, int disk, int extra)
{
    static const char *const envp[] = {SPAWN_PATH, NULL};
    /* The cgroup module's join: the child writes "0" (v1: into `tasks`, which moves this thread
     * without the kernel's global threadgroup lock). */
    if (eph_ns_cgroup_join(L->cg_fds, L->ncg) != 0)
        _exit(127);
    setsid();
    struct rlimit fsize = {L->fsize, L->fsize}, core = {0, 0};
    /* The console is the only file QEMU writes (but for a saved machine): its size is its cap.
     * Past it, writes fail and QEMU drops console output (SIGXFSZ is ignored, not fatal). */
    if (setrlimit(RLIMIT_FSIZE, &fsize) != 0 || setrlimit(RLIMIT_CORE, &core) != 0)
        _exit(127);
    sigset_t none;
    sigemptyset(&none);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    signal(SIGXFSZ, SIG_IGN);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Exactly the descriptors QEMU's command line names. */
    if (dup2(null_fd, 0) < 0 || dup2(console_fd, 1) < 0 || dup2(console_fd, 2) < 0)
        _exit(127);
    int c = fcntl(chan_fd, F_DUPFD_CLOEXEC, 10), i = fcntl(initrd, F_DUPFD_CLOEXEC, 10);
    int k = fcntl(kernel, F_DUPFD_CLOEXEC, 10), d = fcntl(disk, F_DUPFD_CLOEXEC, 10);
    int x = extra >= 0 ? fcntl(extra, F_DUPFD_CLOEXEC, 10) : -1;
    if (c < 0 || i < 0 || k < 0 || d < 0 || dup2(c, FD_CHANNEL) < 0 || dup2(i, FD_INITRD) < 0 ||
        dup2(k, FD_KERNEL) < 0 || dup2(d, FD_DISK) < 0)
        _exit(127);
    if (extra >= 0 && (x < 0 || dup2(x, FD_EXTRA) < 0))
        _exit(127);
    if (syscall(SYS_close_range, extra >= 0 ? FD_EXTRA + 1 : FD_DISK + 1, ~0u, 0) != 0)
        _exit(127);
    /* No capability survives the exec, whatever the uid. */
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            _exit(127);
    if (syscall(SYS_setgroups, L->ngroups, L->groups) != 0 ||
        syscall(SYS_setresgid, L->gid, L->gid, L->gid) != 0 ||
        syscall(SYS_setresuid, L->uid, L->uid, L->uid) != 0)
        _exit(127);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        _exit(127);
    /* Dies with the server (with the thread that made it: the run's worker, which destroys the
     * sandbox before it does anything else). After the uid change, which clears it; the check
     * after it closes the race with a server that died before. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent)
        _exit(127);
    char *const *argv = (char *const *)L->argv;
    execve(L->argv[0], argv, (char *const *)envp);
    _exit(127);
}

/* The host uid QEMU runs as, and its groups: its own uid, plus the group that may open /dev/kvm
 * when KVM is used. Where only root may open /dev/kvm, QEMU stays uid 0, still without any
 * capability (documented in docs/SECURITY.md). */
static void identity(struct vm_launch *L, const struct vm_sandbox *sb, bool kvm)
{
    L->uid = L->gid = sb->uid.id;
    L->ngroups = 0;
    if (!kvm)
        return;
    struct stat st;
    if (stat("/dev/kvm", &st) != 0 || (st.st_mode & 0006) == 0006)
        return;
    if ((st.st_mode & 0060) == 0060 && st.st_gid != 0) {
        L->groups[0] = st.st_gid;
        L->ngroups = 1;
        return;
    }
    EPH_DEBUG(COMPONENT, "/dev/kvm is root's alone: QEMU runs as uid 0 without capabilities");
    L->uid = L->gid = 0;
}

/* extra: the descriptor given as FD_EXTRA (START_PARK, START_RESTORE), or -1. */
static int qemu_start(struct vm_sandbox *sb, const struct vm_paths *p,
                      const struct eph_sandbox_limits *l, bool kvm, int chan, int initrd,
                      enum vm_start how, int extra)
{
    struct vm_launch *L = calloc(1, sizeof(*L));
    if (!L)
        return -ENOMEM;
    int rc = launch_prepare(L, sb, p, l, kvm, how);
    if (rc) {
        free(L);
        return rc;
    }
    identity(L, sb, kvm);
    L->ncg = 0;
    rc = eph_ns_cgroup_open_join(&sb->cg, L->cg_fds, &L->ncg);
    int null = rc ? -1 : open("/dev/null", O_RDWR | O_CLOEXEC);
    if (!rc && null < 0)
        rc = -errno;
    /* Opened here, as root: QEMU's uid cannot reach them in the root-only cache. */
    int kernel = rc ? -1 : open(p->kernel, O_RDONLY | O_CLOEXEC);
    if (!rc && kernel < 0)
        rc = -errno;
    int disk = rc ? -1 : open(p->disk, O_RDONLY | O_CLOEXEC);
    if (!rc && disk < 0)
        rc = -errno;
    if (!rc) {
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
            rc = -errno;
        else if (pid == 0)
            qemu_child(L, parent, null, sb->console_fd, chan, initrd, kernel, disk, extra);
        else {
            eph_guest_sandbox_watch(&sb->g, pid, eph_guest_pidfd_open(pid));
        }
    }
    if (null >= 0)
        close(null);
    if (kernel >= 0)
        close(kernel);
    if (disk >= 0)
        close(disk);
    for (int i = 0; i < L->ncg; i++)
        close(L->cg_fds[i]);
    free(L);
    return rc;
}

/* ---- saved machines ---------------------------------------------------------------------- */

/* Builds are one at a time (a second create of the same shape waits for the first's file), and a
 * shape whose build failed is booted for the rest of the process. */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static char snap_failed[8][17];
static unsigned snap_nfailed;
static _Atomic unsigned snap_seq;

static bool snapshots_enabled(void)
{
    const char *env = getenv(SNAPSHOTS_ENV);
    return !env || strcmp(env, "0") != 0;
}

/* The first "flags" line of /proc/cpuinfo: under KVM the guest's CPU is the host's (-cpu host),
 * so a saved machine belongs to this host's processor model. */
static void cpu_flags(char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f)
        return;
    char line[8192];
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "flags", 5) == 0 || strncmp(line, "model name", 10) == 0) {
            size_t used = strlen(out);
            eph_text_format_cut(out + used, cap - used, "%s", line);
            if (strncmp(line, "flags", 5) == 0)
                break;
        }
    fclose(f);
}

/* The key of the machine this sandbox would restore: the saving QEMU's command line without its
 * name and its measured TSC rate, the accelerator's CPU, and the files behind the descriptors. */
static int snapshot_key(const struct vm_sandbox *sb, const struct vm_paths *p,
                        const struct eph_sandbox_config *cfg, bool kvm, char key[17])
{
    struct vm_launch *L = calloc(1, sizeof(*L));
    struct eph_buf text;
    eph_buf_init(&text, 1u << 20);
    int rc = L ? launch_prepare(L, sb, p, &sb->g.limits, kvm, START_PARK) : -ENOMEM;
    for (size_t i = 0; !rc && L->argv[i]; i++) {
        const char *arg = L->argv[i];
        if (i > 0 && strcmp(L->argv[i - 1], "-name") == 0)
            continue;
        size_t len = strlen(arg);
        if (arg == L->append && strstr(arg, " tsc_early_khz="))
            len = (size_t)(strstr(arg, " tsc_early_khz=") - arg);
        rc = eph_buf_append(&text, arg, len);
        if (!rc)
            rc = eph_buf_append(&text, "\n", 1);
    }
    if (!rc && kvm) {
        char flags[8192];
        cpu_flags(flags, sizeof(flags));
        rc = eph_buf_append(&text, flags, strlen(flags));
    }
    if (!rc)
        rc = eph_buf_append(&text, "", 1);
    if (!rc) {
        const char *files[] = {qemu(), cfg->init_path, p->kernel, p->modules, p->disk};
        rc = eph_vm_snapshot_key(text.data, files, sizeof(files) / sizeof(files[0]), key);
    }
    eph_buf_release(&text);
    free(L);
    return rc;
}

static bool snapshot_failed_before(const char *key)
{
    for (unsigned i = 0; i < snap_nfailed; i++)
        if (strcmp(snap_failed[i], key) == 0)
            return true;
    return false;
}

/* Call with snap_lock. */
static void snapshot_failed_now(const char *key)
{
    if (snapshot_failed_before(key))
        return;
    unsigned i = snap_nfailed < 8 ? snap_nfailed++ : 7;
    snprintf(snap_failed[i], sizeof(snap_failed[i]), "%s", key);
}

static void snapshot_mark_failed(const char *key)
{
    pthread_mutex_lock(&snap_lock);
    snapshot_failed_now(key);
    pthread_mutex_unlock(&snap_lock);
}

/* Boots a guest of this sandbox's shape to its parked point, inside the sandbox's cgroup and as
 * its uid, and saves it to path (written beside it, renamed when complete). The QEMU is reaped
 * before this returns. Call with snap_lock. */
static int snapshot_build(struct vm_sandbox *sb, const struct vm_paths *p, bool kvm, int initrd,
                          const char *path)
{
    char tmp[PATH_MAX + 64], why[256] = "";
    int chan[2] = {-1, -1}, mon[2] = {-1, -1}, state = -1, rc = 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp-%d-%u", path, (int)getpid(), atomic_fetch_add(&snap_seq, 1));
    if (mkdir(p->snapdir, 0700) != 0 && errno != EEXIST)
        rc = -errno;
    if (!rc && (state = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
        rc = -errno;
    if (rc)
        eph_text_format_cut(why, sizeof(why), "cannot make its file in %s", p->snapdir);
    if (!rc && (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0 ||
                socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, mon) != 0))
        rc = -errno;
    uint64_t t0 = eph_clock_mono_ns();
    if (!rc)
        rc = qemu_start(sb, p, &sb->g.limits, kvm, chan[1], initrd, START_PARK, mon[1]);
    if (chan[1] >= 0)
        close(chan[1]);
    if (mon[1] >= 0)
        close(mon[1]);
    uint64_t deadline = t0 + (uint64_t)sb->g.hello_timeout_ms * 1000000u;
    if (!rc && (rc = eph_vm_wait_parked(chan[0], deadline)))
        eph_text_format_cut(why, sizeof(why), "the guest did not park: %s", strerror(-rc));
    if (!rc)
        rc = eph_vm_qmp_save(mon[0], state, deadline, why, sizeof(why));
    /* Saved, QEMU was told to quit; otherwise its guest waits for a resume that will not come. */
    int status = 0;
    if (sb->g.pid > 0 && eph_guest_sandbox_reap(&sb->g, rc ? 0 : EXIT_GRACE_MS, &status) && !rc)
        rc = -ECHILD;
    if (chan[0] >= 0)
        close(chan[0]);
    if (mon[0] >= 0)
        close(mon[0]);
    if (state >= 0 && close(state) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        if (state >= 0)
            unlink(tmp);
        char last[256];
        console_tail(sb->console_fd, last, sizeof(last));
        if (!atomic_load(&sb->g.interrupted))
            EPH_WARN(COMPONENT, "cannot save a microVM of this shape (booting instead): %s%s%s%s%s",
                     strerror(-rc), why[0] ? ": " : "", why, last[0] ? "; console: " : "", last);
        return rc;
    }
    EPH_INFO(COMPONENT,
             "saved a parked microVM in %llu ms: later sandboxes of this shape restore it",
             (unsigned long long)((eph_clock_mono_ns() - t0) / 1000000u));
    int removed = eph_vm_snapshot_prune(p->snapdir);
    if (removed)
        EPH_DEBUG(COMPONENT, "removed %d older saved microVMs", removed);
    return 0;
}

/* The saved machine this sandbox restores, opened (made first if there is none yet), or -1: a
 * boot then. path gets its file. */
static int snapshot_open(struct vm_sandbox *sb, const struct eph_sandbox_config *cfg,
                         const struct vm_paths *p, bool kvm, int initrd, char *path, size_t cap,
                         char key[17])
{
    int rc = snapshot_key(sb, p, cfg, kvm, key);
    if (rc) {
        EPH_DEBUG(COMPONENT, "no key for a saved microVM: %s", strerror(-rc));
        return -1;
    }
    if (eph_text_format(path, cap, "%s/%s.state", p->snapdir, key))
        return -1;
    pthread_mutex_lock(&snap_lock);
    int fd = -1;
    if (!snapshot_failed_before(key)) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        /* None (or none that can be opened: the build then says why). */
        if (fd < 0) {
            rc = snapshot_build(sb, p, kvm, initrd, path);
            if (rc && rc != -ECANCELED && !atomic_load(&sb->g.interrupted))
                snapshot_failed_now(key);
            fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
        }
    }
    pthread_mutex_unlock(&snap_lock);
    return fd;
}

/* ---- the backend ------------------------------------------------------------------------- */

enum accel { ACCEL_NONE, ACCEL_KVM, ACCEL_TCG };

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static bool kvm_checked;
static bool kvm_boots;
static char kvm_why[384];
/* The console's last word when the probe's boot failed (under probe_lock). */
static char probe_console[160];
/* Set by the probe for create: the accelerator the probe found usable. */
static _Atomic int chosen_accel = ACCEL_NONE;

static bool tcg_allowed(const struct eph_sandbox_config *cfg)
{
    const char *env = getenv(ALLOW_TCG_ENV);
    return env && strcmp(env, "1") == 0 && cfg->backend && strcmp(cfg->backend, "microvm") == 0;
}

struct vm_boot {
    enum accel accel;
    bool probing;   /* a failed boot is an answer, not an error (logged at debug level) */
    bool snapshots; /* may restore (or save) a parked machine */
    /* Set by vm_boot: restored from this file, filed under this key. */
    bool restored;
    char key[17];
    char snapshot[PATH_MAX];
};

static int vm_boot(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg, int *chan_fd)
{
    struct vm_sandbox *sb = (struct vm_sandbox *)g;
    struct vm_boot *b = g->boot_arg;
    struct vm_paths paths;
    char why[PATH_MAX + 128];
    int chan[2] = {-1, -1};
    sb->console_fd = -1;
    sb->uid.fd = -1;
    sb->accel = b->accel;
    sb->probing = b->probing;
    g->hello_timeout_ms = b->accel == ACCEL_KVM ? BOOT_TIMEOUT_KVM_MS : BOOT_TIMEOUT_TCG_MS;
    if (!qemu()) {
        EPH_ERROR(COMPONENT, QEMU_NAME " not found");
        return -ENOENT;
    }
    int rc = paths_find(cfg, &paths, why, sizeof(why));
    if (rc) {
        EPH_ERROR(COMPONENT, "%s", why);
        return rc;
    }
    int initrd = initrd_get(cfg->init_path ? cfg->init_path : "", paths.modules);
    if (initrd < 0) {
        EPH_ERROR(COMPONENT, "cannot assemble the microvm initramfs: %s", strerror(-initrd));
        return initrd;
    }
    if ((rc = eph_hostid_acquire(HOST_ID_BASE, HOST_IDS, &sb->uid))) {
        EPH_ERROR(COMPONENT, "cannot lease a host uid for QEMU: %s",
                  rc == -EAGAIN ? "every one is in use" : strerror(-rc));
        return rc;
    }
    /* The cgroup holds QEMU: the guest's memory and QEMU's own, QEMU's threads, and one CPU more
     * than the guest's for QEMU's I/O threads (the guest itself has exactly vcpus CPUs). */
    struct eph_sandbox_limits host = g->limits;
    host.memory_mib = g->limits.memory_mib + EPH_MICROVM_GUEST_EXTRA_MIB + EPH_MICROVM_QEMU_MIB;
    host.pids = EPH_MICROVM_QEMU_TASKS;
    host.vcpus = g->limits.vcpus + 1;
    if ((rc = eph_ns_cgroup_create(&sb->cg, g->name, &host)))
        return rc;
    sb->console_fd = memfd_create("ephemeral-console", MFD_CLOEXEC);
    if (sb->console_fd < 0)
        return -errno;
    bool kvm = b->accel == ACCEL_KVM;
    int state = b->snapshots ? snapshot_open(sb, cfg, &paths, kvm, initrd, b->snapshot,
                                             sizeof(b->snapshot), b->key)
                             : -1;
    if (atomic_load(&g->interrupted)) {
        if (state >= 0)
            close(state);
        return -ECANCELED;
    }
    b->restored = state >= 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0) {
        rc = -errno;
        if (state >= 0)
            close(state);
        return rc;
    }
    rc = qemu_start(sb, &paths, &g->limits, kvm, chan[1], initrd,
                    b->restored ? START_RESTORE : START_BOOT, state);
    close(chan[1]);
    if (state >= 0)
        close(state);
    /* The parked guest's first read: its parameters and what makes it unique. Far below a
     * socket's buffer: written whole before QEMU has even read its file. */
    if (!rc && b->restored) {
        char line[EPH_VM_RESUME_MAX];
        int n = eph_vm_resume_line(line, sizeof(line), g->run_dir, &g->limits);
        rc = n < 0 ? n : eph_fileio_write_all(chan[0], line, (size_t)n);
        explicit_bzero(line, sizeof(line));
    }
    if (rc) {
        close(chan[0]);
        EPH_ERROR(COMPONENT, "cannot start %s: %s", qemu(), strerror(-rc));
        return rc;
    }
    if (b->restored)
        EPH_DEBUG(COMPONENT, "%s: restoring the saved microVM %s", g->name, b->key);
    *chan_fd = chan[0];
    return 0;
}

static void vm_boot_failed(struct eph_guest_sandbox *g, int rc)
{
    struct vm_sandbox *sb = (struct vm_sandbox *)g;
    char last[256];
    console_tail(sb->console_fd, last, sizeof(last));
    const char *accel = sb->accel == ACCEL_KVM ? "kvm" : "tcg";
    if (sb->probing)
        EPH_DEBUG(COMPONENT, "the probe's microVM did not start (%s): %s%s%s", accel, strerror(-rc),
                  last[0] ? "; console: " : "", last);
    else
        EPH_ERROR(COMPONENT, "the microVM did not start (%s): %s%s%s", accel, strerror(-rc),
                  last[0] ? "; console: " : "", last);
    if (sb->probing && last[0])
        eph_text_format_cut(probe_console, sizeof(probe_console), "%s", last);
}

/* The guest ends itself when asked (or when the channel closes): QEMU then exits on its own. A
 * guest that does not answer is killed all the same after the grace. */
static int vm_release(struct eph_guest_sandbox *g)
{
    struct vm_sandbox *sb = (struct vm_sandbox *)g;
    int status = 0;
    int rc = eph_guest_sandbox_reap(g, EXIT_GRACE_MS, &status);
    if (!rc && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        char last[256];
        console_tail(sb->console_fd, last, sizeof(last));
        EPH_DEBUG(COMPONENT, "QEMU of %s exited with status %d%s%s", g->name, WEXITSTATUS(status),
                  last[0] ? ": " : "", last);
    }
    /* Kills whatever is left in it (nothing, normally) and removes it. */
    if (sb->cg.n) {
        int c = eph_ns_cgroup_destroy(&sb->cg);
        if (c && !rc)
            rc = c;
    }
    if (sb->console_fd >= 0)
        close(sb->console_fd);
    eph_hostid_release(&sb->uid);
    return rc;
}

static int vm_create_with(const struct eph_sandbox_config *cfg, enum accel accel, bool probing,
                          struct eph_sandbox **out)
{
    /* The probe boots: a boot is what it proves. */
    struct vm_boot *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    *b = (struct vm_boot){
        .accel = accel, .probing = probing, .snapshots = !probing && snapshots_enabled()};
    int rc = eph_guest_sandbox_create(&eph_sandbox_microvm_ops, cfg, b, out);
    if (rc && b->restored && rc != -ECANCELED) {
        /* A saved machine that does not come back is not tried again: removed, and booted. */
        EPH_WARN(COMPONENT, "a saved microVM did not restore (%s): removing it and booting",
                 strerror(-rc));
        unlink(b->snapshot);
        snapshot_mark_failed(b->key);
        b->snapshots = b->restored = false;
        rc = eph_guest_sandbox_create(&eph_sandbox_microvm_ops, cfg, b, out);
    }
    free(b);
    return rc;
}

static int vm_probe(const struct eph_sandbox_config *cfg, char *why, size_t whylen);

static int vm_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    enum accel accel = (enum accel)atomic_load(&chosen_accel);
    if (accel == ACCEL_NONE) {
        char why[512];
        int rc = vm_probe(cfg, why, sizeof(why));
        if (rc) {
            EPH_ERROR(COMPONENT, "the microvm backend does not work here: %s", why);
            return rc;
        }
        accel = (enum accel)atomic_load(&chosen_accel);
    }
    return vm_create_with(cfg, accel, false, out);
}

/* ---- probe and orphans ------------------------------------------------------------------- */

/* A tiny VM boots under KVM and answers a ping. */
static int kvm_boot_check(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    struct eph_sandbox_config c = *cfg;
    struct eph_sandbox *sb = NULL;
    c.limits.memory_mib = 128;
    c.limits.disk_mib = 16;
    c.limits.fsize_bytes = 0;
    c.owner_tag = "probe";
    probe_console[0] = '\0';
    int rc = vm_create_with(&c, ACCEL_KVM, true, &sb);
    if (rc) {
        snprintf(why, whylen, "KVM does not boot a guest here: %s%s%s", strerror(-rc),
                 probe_console[0] ? ": " : "", probe_console);
        return rc;
    }
    rc = eph_guest_sandbox_ping(sb, 5000);
    if (rc)
        snprintf(why, whylen, "a KVM guest does not answer a ping: %s", strerror(-rc));
    int d = eph_guest_sandbox_destroy(sb);
    if (!rc && d) {
        snprintf(why, whylen, "a microVM is not removed cleanly: %s", strerror(-d));
        rc = d;
    }
    return rc;
}

static int vm_probe(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    struct vm_paths paths;
    char reason[512];
    int rc;
    reason[0] = '\0';
    pthread_mutex_lock(&probe_lock);
    if (!qemu()) {
        snprintf(reason, sizeof(reason),
                 QEMU_NAME " not found on PATH (install the Debian package qemu-system-x86)");
        rc = -ENOENT;
    } else if (geteuid() != 0) {
        snprintf(reason, sizeof(reason),
                 "the microvm backend needs root (cgroups, and a uid of its own for QEMU)");
        rc = -EPERM;
    } else if (!cfg->init_path || access(cfg->init_path, R_OK) != 0) {
        snprintf(reason, sizeof(reason), "ephemeral-init '%s' is not readable",
                 cfg->init_path ? cfg->init_path : "");
        rc = -ENOENT;
    } else if ((rc = paths_find(cfg, &paths, reason, sizeof(reason))) != 0) {
        /* reason is set */
    } else if ((rc = eph_ns_cgroup_probe(reason, sizeof(reason))) != 0) {
        /* reason is set */
    } else {
        /* KVM is tried once per process, whatever the caller: a boot is the only proof. */
        if (!kvm_checked) {
            kvm_why[0] = '\0';
            int k = kvm_present(kvm_why, sizeof(kvm_why));
            if (!k)
                k = kvm_boot_check(cfg, kvm_why, sizeof(kvm_why));
            kvm_boots = k == 0;
            kvm_checked = true;
            if (!kvm_boots)
                EPH_DEBUG(COMPONENT, "microvm: %s", kvm_why);
        }
        if (kvm_boots) {
            atomic_store(&chosen_accel, ACCEL_KVM);
            rc = 0;
        } else if (tcg_allowed(cfg)) {
            EPH_WARN(COMPONENT,
                     "microvm: %s; using software emulation (TCG) because " ALLOW_TCG_ENV
                     "=1: slow, for tests only",
                     kvm_why);
            atomic_store(&chosen_accel, ACCEL_TCG);
            rc = 0;
        } else {
            eph_text_format_cut(reason, sizeof(reason),
                                "%s; software emulation (TCG) is never chosen automatically (only "
                                "with --backend microvm and " ALLOW_TCG_ENV "=1, for tests)",
                                kvm_why);
            rc = -ENODEV;
        }
    }
    pthread_mutex_unlock(&probe_lock);
    if (rc && why)
        snprintf(why, whylen, "%s", reason);
    return rc;
}

static void sweep_in(const char *mnt, int version, void *arg)
{
    int *removed = arg;
    char parent[PATH_MAX + 32];
    snprintf(parent, sizeof(parent), "%s/ephemeral", mnt);
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR || !eph_guest_name_orphaned(e->d_name, "vm"))
            continue;
        /* The cgroup module kills every task listed (the orphan's QEMU) and removes it. */
        struct eph_ns_cgroup cg = {.version = version, .n = 1};
        snprintf(cg.dirs[0], sizeof(cg.dirs[0]), "%.3000s/%.255s", parent, e->d_name);
        if (eph_ns_cgroup_destroy(&cg) == 0) {
            EPH_INFO(COMPONENT, "removed orphaned microVM cgroup '%s' (and its QEMU)", cg.dirs[0]);
            (*removed)++;
        }
    }
    closedir(d);
}

static int vm_cleanup_orphans(void)
{
    int removed = 0;
    eph_guest_cgroup_mounts(sweep_in, &removed);
    return removed;
}

static const struct eph_sandbox_backend vm_backend = {
    .size = sizeof(struct vm_sandbox),
    .name_prefix = "vm",
    .shutdown_before_close = true,
    .boot = vm_boot,
    .boot_failed = vm_boot_failed,
    .release = vm_release,
    .pause = eph_guest_pause_watched, /* QEMU is the whole machine */
};

const struct eph_sandbox_ops eph_sandbox_microvm_ops = {
    .name = "microvm",
    .ready_message = "microVM ready",
    .destroyed_message = "microVM destroyed",
    .probe = vm_probe,
    .create = vm_create,
    .cleanup_orphans = vm_cleanup_orphans,
    EPH_GUEST_SANDBOX_OPS(&vm_backend),
};
