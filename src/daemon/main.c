/*
 * ephemerald - the Ephemeral server and its administration commands.
 *
 * `--help` (or `-h`) anywhere before `--` prints the usage of the command it follows, with every
 * flag, on stdout, and exits 0: `ephemerald serve --help`, `ephemerald admin init --help`. The
 * commands themselves answer a usage error with exit status 2.
 */
#include <stdbool.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "common/version.h"
#include "daemon/commands.h"

/* The flags every command that opens the store takes (daemon/options.c). */
#define SERVER_FLAGS                                                                               \
    "  --config FILE            the JSON configuration file (also EPHEMERALD_CONFIG)\n"            \
    "  --db PATH|postgres://... the store: a SQLite file, or a PostgreSQL URL\n"                   \
    "  --listen ADDR:PORT       where the API listens (default 127.0.0.1:8080)\n"                  \
    "  --sandbox B              auto, namespaces, gvisor or microvm\n"                             \
    "  --max-concurrent-runs N  runs executing at once on this node, 1 to 4096\n"                  \
    "  --log-format F           text or json\n"                                                    \
    "  --log-level L            debug, info, warn or error\n"

static const struct {
    const char *words; /* the command's words after "ephemerald" */
    const char *synopsis;
    const char *flags;
} usages[] = {
    {"serve",
     "ephemerald serve [--listen ADDR:PORT] [--db PATH|postgres://...] [--sandbox B]\n"
     "                 [--config FILE] [--max-concurrent-runs N] [--log-format text|json]\n"
     "                 [--log-level L]\n",
     SERVER_FLAGS},
    {"admin init", "ephemerald admin init [--org NAME] [--credit-micros N] [SERVER FLAGS]\n",
     "  --org NAME               the organization (default \"default\"), created if absent\n"
     "  --credit-micros N        its first credit, in micro-dollars (default $100)\n" SERVER_FLAGS},
    {"admin key create",
     "ephemerald admin key create --org NAME [--role admin|member] [SERVER FLAGS]\n",
     "  --org NAME               the organization of the new key\n"
     "  --role R                 admin or member (default member)\n" SERVER_FLAGS},
    {"admin credit", "ephemerald admin credit --org NAME --micros N [SERVER FLAGS]\n",
     "  --org NAME               the organization\n"
     "  --micros N               the amount to add, in micro-dollars\n" SERVER_FLAGS},
    {"admin connection add",
     "ephemerald admin connection add --org NAME --name N --base-url URL --methods GET,POST\n"
     "                                [--path-prefix P]... [--header 'Name: value']...\n"
     "                                [--query 'name=value']... [SERVER FLAGS]\n",
     "  --org NAME               the organization that owns the connection\n"
     "  --name N                 the connection's name, as runs name it\n"
     "  --base-url URL           the upstream API (https://, or http:// by choice)\n"
     "  --methods M,M            the HTTP methods allowed\n"
     "  --path-prefix P          a path prefix allowed (repeatable; default: every path)\n"
     "  --header 'Name: value'   a header the broker adds (the credential; repeatable)\n"
     "  --query 'name=value'     a query parameter the broker adds (repeatable)\n" SERVER_FLAGS},
    {"sandbox run",
     "ephemerald sandbox run [--backend B] [--memory-mib N] [--pids N] [--vcpus N]\n"
     "                       [--disk-mib N] [--timeout S] [--output-cap BYTES] [--env K=V]...\n"
     "                       [--image DIR] [--file LOCAL[:PATH]]... [--json] -- COMMAND [ARG...]\n",
     "  --backend B              auto, namespaces, gvisor or microvm\n"
     "  --memory-mib N           the sandbox's memory limit\n"
     "  --pids N                 its process limit\n"
     "  --vcpus N                its CPUs\n"
     "  --disk-mib N             its scratch disk\n"
     "  --timeout S              the command's wall time (fractions allowed)\n"
     "  --output-cap BYTES       output kept per stream\n"
     "  --env K=V                an environment variable of the command (repeatable)\n"
     "  --image DIR              the image's root file system\n"
     "  --file LOCAL[:PATH]      a file put into the scratch directory (repeatable)\n"
     "  --json                   print the create, exec and destroy timings as JSON\n"},
    {"image build", "ephemerald image build [--dir DIR] [--verbose]\n",
     "  --dir DIR                where the image goes (default var/images/default)\n"
     "  --verbose                show mmdebstrap's output\n"},
    {"image create",
     "ephemerald image create NAME [--packages a,b] [--npm PKG]... [--file PATH=LOCAL]...\n"
     "                        [--run CMD]... [SERVER FLAGS]\n",
     "  --packages a,b           Debian packages added to the default image's\n"
     "  --npm PKG                an npm package installed globally (repeatable)\n"
     "  --file PATH=LOCAL        a local file put at PATH in the image (repeatable)\n"
     "  --run CMD                a shell command run as root in the image at build time\n"
     "                           (repeatable, in order)\n" SERVER_FLAGS},
    {"image import", "ephemerald image import NAME ARCHIVE [SERVER FLAGS]\n",
     "  ARCHIVE                  a `docker save` tar or an OCI image layout tar\n" SERVER_FLAGS},
    {"image list", "ephemerald image list [SERVER FLAGS]\n", SERVER_FLAGS},
    {"image rm", "ephemerald image rm NAME [SERVER FLAGS]\n", SERVER_FLAGS},
};

static void usage_all(FILE *f)
{
    for (size_t i = 0; i < sizeof(usages) / sizeof(usages[0]); i++) {
        fputs(i ? "       " : "usage: ", f);
        fputs(usages[i].synopsis, f);
    }
    fputs("       ephemerald --version\n"
          "`ephemerald COMMAND --help` lists a command's flags. See ephemerald(8).\n",
          f);
}

/* The usage entry whose words start argv[1..], longest first ("admin key create" before
 * "admin"), or -1. */
static int find_usage(int argc, char **argv)
{
    int best = -1;
    size_t best_words = 0;
    for (size_t i = 0; i < sizeof(usages) / sizeof(usages[0]); i++) {
        char words[64];
        snprintf(words, sizeof(words), "%s", usages[i].words);
        size_t n = 0;
        bool match = true;
        for (char *save = NULL, *w = strtok_r(words, " ", &save); w;
             w = strtok_r(NULL, " ", &save), n++)
            if (1 + (int)n >= argc || strcmp(argv[1 + n], w) != 0)
                match = false;
        if (match && n > best_words) {
            best = (int)i;
            best_words = n;
        }
    }
    return best;
}

/* `--help` before any `--`: the usage of the command it follows, on stdout. */
static bool help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}

static int print_help(int argc, char **argv)
{
    int u = find_usage(argc, argv);
    if (u < 0) {
        /* "ephemerald admin --help": every command that starts with those words. */
        bool any = false;
        for (size_t i = 0; argc > 1 && i < sizeof(usages) / sizeof(usages[0]); i++) {
            size_t n = strlen(argv[1]);
            if (strncmp(usages[i].words, argv[1], n) == 0 &&
                (usages[i].words[n] == ' ' || usages[i].words[n] == '\0')) {
                fputs(any ? "       " : "usage: ", stdout);
                fputs(usages[i].synopsis, stdout);
                any = true;
            }
        }
        if (!any)
            usage_all(stdout);
        return 0;
    }
    printf("usage: %s\n%s", usages[u].synopsis, usages[u].flags);
    fputs("  --help                   this text\n", stdout);
    return 0;
}

/* Every sandbox holds two guest-protocol buffers of a frame's size (1 MiB each, mostly never
 * written). glibc raises its mmap threshold as large blocks are freed, after which such buffers
 * come from the heap, where memory once written stays resident: a hundred idle sandboxes then cost
 * the server twice the memory. A fixed threshold keeps large blocks mapped on their own, resident
 * only where written and returned to the system when freed (docs/BENCH.md, "Sandboxes"). */
#define MMAP_THRESHOLD_BYTES (128 * 1024)

int main(int argc, char **argv)
{
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    if (argc < 2) {
        usage_all(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        puts("ephemerald " EPH_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        if (strcmp(cmd, "help") == 0 && argc > 2)
            return print_help(argc - 1, argv + 1);
        usage_all(stdout);
        return 0;
    }
    if (help_asked(argc, argv))
        return print_help(argc, argv);
    if (strcmp(cmd, "serve") == 0)
        return eph_cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "admin") == 0)
        return eph_cmd_admin(argc - 1, argv + 1);
    if (strcmp(cmd, "image") == 0 && argc > 2 && strcmp(argv[2], "build") != 0)
        return eph_cmd_images(argc - 1, argv + 1);
    if (strcmp(cmd, "image") == 0)
        return eph_cmd_image(argc - 1, argv + 1);
    if (strcmp(cmd, "sandbox") == 0)
        return eph_cmd_sandbox(argc - 1, argv + 1);
    fprintf(stderr, "ephemerald: unknown command '%s'\n", cmd);
    usage_all(stderr);
    return 2;
}
