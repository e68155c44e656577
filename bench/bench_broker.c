/*
 * bench_broker.c - the broker's cost: request latency through the sandbox's proxy against the same
 * request made directly on the host and through tinyproxy, and CONNECT tunnel throughput against a
 * direct download and tinyproxy's CONNECT (docs/BENCH.md). A real namespaces sandbox with the
 * broker's tunnel open; a loopback upstream of its own (a forked process answering small requests
 * and bulk downloads with large writes, so that the upstream does not bound the figures); the same
 * Python client inside and outside; tinyproxy, when installed, started on a loopback port with a
 * temporary configuration and stopped by its PID.
 *
 *   build/bench/bench_broker [REQUESTS] [MIB]     (as root, from the repository's top)
 *
 * Prints a Markdown table (bench/bench.py copies it into the report) and, last, one line
 * "json {...}" with the figures.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker/broker.h"
#include "sandbox/sandbox.h"

/* N sequential requests on fresh connections, directly to HOST:PORT or through the proxy at
 * HOST:PORT with an absolute target; prints the median and the 90th percentile in microseconds. */
static const char client_py[] =
    "import socket,sys,time\n"
    "h,p,t,n=sys.argv[1],int(sys.argv[2]),sys.argv[3],int(sys.argv[4])\n"
    "req=('GET %s HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'%t).encode()\n"
    "ts=[]\n"
    "for i in range(n):\n"
    "  a=time.perf_counter()\n"
    "  s=socket.create_connection((h,p)); s.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
    "  s.sendall(req)\n"
    "  while s.recv(65536): pass\n"
    "  s.close(); ts.append(time.perf_counter()-a)\n"
    "ts.sort(); print('%.0f %.0f'%(ts[len(ts)//2]*1e6, ts[len(ts)*9//10]*1e6))\n";

/* ---- the upstream: one process, one connection at a time ------------------------------------ */

static void serve_one(int c)
{
    char head[4096];
    size_t have = 0;
    while (have < sizeof(head) - 1) {
        ssize_t r = recv(c, head + have, sizeof(head) - 1 - have, 0);
        if (r <= 0)
            return;
        have += (size_t)r;
        head[have] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const char *big = strstr(head, "/big?n=");
    unsigned long long n = big ? strtoull(big + 7, NULL, 10) : 2;
    char hd[160];
    int hn = snprintf(hd, sizeof(hd),
                      "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n%s", n,
                      big ? "" : "ok");
    if (send(c, hd, (size_t)hn, MSG_NOSIGNAL) != hn || !big)
        return;
    static char block[1 << 18];
    while (n) {
        size_t k = n < sizeof(block) ? (size_t)n : sizeof(block);
        ssize_t w = send(c, block, k, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        n -= (unsigned long long)w;
    }
}

static pid_t upstream_start(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&sa, &l))
        return -1;
    *port = ntohs(sa.sin_port);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(600); /* never outlives the benchmark by much */
        for (;;) {
            int c = accept(fd, NULL, NULL);
            if (c < 0)
                continue;
            serve_one(c);
            shutdown(c, SHUT_WR);
            char drain[4096];
            while (recv(c, drain, sizeof(drain), 0) > 0)
                ;
            close(c);
        }
    }
    close(fd);
    return pid;
}

/* A free loopback port (bound and released: the peer binds it right after). */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    unsigned p = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &l) == 0)
        p = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return p;
}

/* tinyproxy in the foreground on a loopback port, with a configuration of its own; 0 when it is
 * not installed or does not come up. */
static pid_t tinyproxy_start(const char *dir, unsigned *port)
{
    if (system("command -v tinyproxy >/dev/null 2>&1") != 0)
        return 0;
    *port = free_port();
    char conf[512];
    snprintf(conf, sizeof(conf), "%s/tinyproxy.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return 0;
    /* No ConnectPort line: CONNECT to any port (the upstream's is not 443). */
    fprintf(f,
            "Port %u\nListen 127.0.0.1\nTimeout 60\nMaxClients 64\nAllow 127.0.0.1\n"
            "LogLevel Critical\nDisableViaHeader Yes\n",
            *port);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("tinyproxy", "tinyproxy", "-d", "-c", conf, (char *)NULL);
        _exit(127);
    }
    /* Up when it accepts (bounded). */
    for (int i = 0; i < 100; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok)
            return pid;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return 0;
}

/* The broker alone, without the sandbox: a host listener whose connections become broker streams
 * directly (what the guest agent and the channel do otherwise), so that the table can say which
 * part of the path costs what. */
struct host_front {
    int fd;
    struct eph_broker *b;
};

static void *host_front_main(void *arg)
{
    struct host_front *h = arg;
    for (uint32_t id = 1;; id += 2) {
        int c = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL; /* the listener was shut down */
        if (eph_broker_on_stream(h->b, id, c) < 0)
            return NULL;
    }
}

static int host_front_start(struct host_front *h, pthread_t *th, unsigned *port)
{
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    if (h->fd < 0 || bind(h->fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(h->fd, 64) ||
        getsockname(h->fd, (struct sockaddr *)&sa, &l))
        return -1;
    *port = ntohs(sa.sin_port);
    return pthread_create(th, NULL, host_front_main, h);
}

static int run_in(struct eph_sandbox *sb, const char *cmd, char *out, size_t cap)
{
    struct eph_exec_request req = {
        .command = cmd, .timeout_ms = 120000, .stdout_cap = 4096, .stderr_cap = 4096};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    int rc = eph_sandbox_exec(sb, &req, &res);
    snprintf(out, cap, "%s", rc == 0 && res.out.data ? res.out.data : "");
    out[strcspn(out, "\n")] = '\0';
    if (rc == 0 && res.exit_code != 0)
        fprintf(stderr, "bench: '%s' failed: %s\n", cmd, res.err.data ? res.err.data : "");
    eph_exec_result_release(&res);
    return rc;
}

static void run_host(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    out[0] = '\0';
    if (!p)
        return;
    if (!fgets(out, (int)cap, p))
        out[0] = '\0';
    pclose(p);
    out[strcspn(out, "\n")] = '\0';
}

/* "median p90" in microseconds, or zeros. */
static void lat(const char *s, double *med, double *p90)
{
    *med = *p90 = 0;
    if (sscanf(s, "%lf %lf", med, p90) != 2)
        *med = *p90 = 0;
}

static void cell_lat(char *out, size_t cap, double med, double p90)
{
    if (med > 0)
        snprintf(out, cap, "%.0f / %.0f", med, p90);
    else
        snprintf(out, cap, "n/a");
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    int mib = argc > 2 ? atoi(argv[2]) : 256;
    char dir[] = "/tmp/ephemeral-bench-broker.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    unsigned up_port = 0, tp_port = 0;
    pid_t up = upstream_start(&up_port);
    if (up < 0) {
        fprintf(stderr, "bench: cannot start the upstream\n");
        return 1;
    }
    pid_t tp = tinyproxy_start(dir, &tp_port);

    struct eph_sandbox_config c = {.backend = "namespaces",
                                   .image = "var/images/default",
                                   .init_path = "build/ephemeral-init"};
    eph_sandbox_limits_default(&c.limits);
    const struct eph_sandbox_ops *ops = eph_sandbox_backend("namespaces");
    char why[256];
    struct eph_sandbox *sb = NULL;
    if (ops->probe(&c, why, sizeof(why)) || ops->create(&c, &sb)) {
        fprintf(stderr, "bench: no namespaces sandbox here\n");
        return 1;
    }
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    if (eph_cidr_parse("127.0.0.1/32", &s.web_private[0]))
        return 1;
    s.nweb_private = 1;
    s.max_response_bytes = (uint64_t)mib << 21;
    /* As a run has it: every exchange recorded. */
    struct eph_broker_run run = {.web = true, .record = true};
    struct eph_broker *b;
    if (eph_broker_new(&s, &run, &b))
        return 1;
    struct eph_sandbox_tunnel t = {.port = EPH_BROKER_PORT,
                                   .max_streams = 16,
                                   .on_stream = eph_broker_on_stream,
                                   .on_bytes = eph_broker_on_bytes,
                                   .arg = b};
    if (sb->ops->open_tunnel(sb, &t)) {
        fprintf(stderr, "bench: cannot open the tunnel\n");
        return 1;
    }
    /* The client script, in the sandbox and on the host. */
    char cmd[4096], out[256], client[600];
    snprintf(client, sizeof(client), "%s/client.py", dir);
    FILE *f = fopen(client, "w");
    if (!f)
        return 1;
    fputs(client_py, f);
    fclose(f);
    if (sb->ops->write_file(sb, "client.py", client_py, sizeof(client_py) - 1, 0644))
        return 1;

    double d_med, d_p90, t_med = 0, t_p90 = 0, b_med, b_p90, h_med = 0, h_p90 = 0;
    /* Warm-up (page cache, the interpreter), then the measured rounds. */
    snprintf(cmd, sizeof(cmd), "python3 %s 127.0.0.1 %u /ok %d", client, up_port, n);
    run_host(cmd, out, sizeof(out));
    run_host(cmd, out, sizeof(out));
    lat(out, &d_med, &d_p90);
    if (tp) {
        snprintf(cmd, sizeof(cmd), "python3 %s 127.0.0.1 %u http://127.0.0.1:%u/ok %d", client,
                 tp_port, up_port, n);
        run_host(cmd, out, sizeof(out));
        lat(out, &t_med, &t_p90);
    }
    struct eph_broker *hb;
    struct host_front hf = {.fd = -1};
    pthread_t hth;
    unsigned hport = 0;
    bool front = eph_broker_new(&s, &run, &hb) == 0;
    if (front && (hf.b = hb, host_front_start(&hf, &hth, &hport) == 0)) {
        snprintf(cmd, sizeof(cmd), "python3 %s 127.0.0.1 %u http://127.0.0.1:%u/ok %d", client,
                 hport, up_port, n);
        run_host(cmd, out, sizeof(out));
        lat(out, &h_med, &h_p90);
        shutdown(hf.fd, SHUT_RDWR);
        pthread_join(hth, NULL);
    }
    if (hf.fd >= 0)
        close(hf.fd);
    if (front)
        eph_broker_free(hb);
    snprintf(cmd, sizeof(cmd), "python3 client.py 127.0.0.1 3128 http://127.0.0.1:%u/ok %d",
             up_port, n);
    run_in(sb, "python3 client.py 127.0.0.1 3128 http://127.0.0.1:1/ok 1 >/dev/null 2>&1", out,
           sizeof(out));
    run_in(sb, cmd, out, sizeof(out));
    lat(out, &b_med, &b_p90);

    char tdirect[64] = "", ttiny[64] = "", tvia[64] = "";
    unsigned long long bytes = (unsigned long long)mib << 20;
    snprintf(cmd, sizeof(cmd),
             "curl -s --noproxy '*' -o /dev/null -w '%%{speed_download}' "
             "'http://127.0.0.1:%u/big?n=%llu'",
             up_port, bytes);
    run_host(cmd, tdirect, sizeof(tdirect));
    if (tp) {
        snprintf(cmd, sizeof(cmd),
                 "curl -s -p -x http://127.0.0.1:%u -o /dev/null -w '%%{speed_download}' "
                 "'http://127.0.0.1:%u/big?n=%llu'",
                 tp_port, up_port, bytes);
        run_host(cmd, ttiny, sizeof(ttiny));
    }
    snprintf(cmd, sizeof(cmd),
             "curl -s -p -o /dev/null -w '%%{speed_download}' 'http://127.0.0.1:%u/big?n=%llu'",
             up_port, bytes);
    run_in(sb, cmd, tvia, sizeof(tvia));
    double mb_direct = atof(tdirect) / 1e6, mb_tiny = atof(ttiny) / 1e6, mb_via = atof(tvia) / 1e6;

    char c1[64], c2[64], c3[64], c4[32], c5[64];
    cell_lat(c1, sizeof(c1), d_med, d_p90);
    cell_lat(c2, sizeof(c2), t_med, t_p90);
    cell_lat(c3, sizeof(c3), b_med, b_p90);
    cell_lat(c5, sizeof(c5), h_med, h_p90);
    if (d_med > 0 && b_med > 0)
        snprintf(c4, sizeof(c4), "+%.0f", b_med - d_med);
    else
        snprintf(c4, sizeof(c4), "n/a");
    printf("| broker | direct (host) | tinyproxy (host, same request) | the broker alone (host) | "
           "through the broker (sandbox) | added by the broker |\n|---|--:|--:|--:|--:|--:|\n");
    printf("| request latency, median / p90 (us, %d fresh connections, Python client) | %s | %s | "
           "%s | %s | %s us (median) |\n",
           n, c1, c2, c5, c3, c4);
    char ct[32];
    if (tp)
        snprintf(ct, sizeof(ct), "%.0f", mb_tiny);
    else
        snprintf(ct, sizeof(ct), "n/a");
    printf("| CONNECT tunnel throughput (MB/s, %d MiB, curl) | %.0f | %s | - | %.0f | %.0f%% of "
           "direct |\n",
           mib, mb_direct, ct, mb_via, mb_direct > 0 ? 100.0 * mb_via / mb_direct : 0.0);
    printf(
        "json {\"requests\": %d, \"mib\": %d, \"latency_us\": {\"direct\": [%.0f, %.0f], "
        "\"tinyproxy\": [%.0f, %.0f], \"broker_alone\": [%.0f, %.0f], \"broker\": [%.0f, %.0f]}, "
        "\"throughput_mbs\": {\"direct\": %.1f, \"tinyproxy\": %.1f, \"broker\": %.1f}}\n",
        n, mib, d_med, d_p90, t_med, t_p90, h_med, h_p90, b_med, b_p90, mb_direct, mb_tiny, mb_via);
    eph_broker_close(b);
    eph_sandbox_destroy(sb);
    eph_broker_free(b);
    if (tp) {
        kill(tp, SIGTERM);
        waitpid(tp, NULL, 0);
    }
    kill(up, SIGTERM);
    waitpid(up, NULL, 0);
    unlink(client);
    snprintf(cmd, sizeof(cmd), "%s/tinyproxy.conf", dir);
    unlink(cmd);
    rmdir(dir);
    return 0;
}
