/*
 * bench_broker.c - the broker's cost: request latency through the sandbox's proxy against the same
 * request made directly on the host, and CONNECT tunnel throughput against a direct download
 * (docs/BENCH.md). A real namespaces sandbox with the broker's tunnel open, a loopback upstream
 * (tests/broker_upstream.py), the same Python client inside and outside; tinyproxy side by side
 * when it is installed.
 *
 *   build/bench/bench_broker [REQUESTS] [MIB]     (as root, from the repository's top)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker/broker.h"
#include "sandbox/sandbox.h"

/* N sequential requests on fresh connections to HOST:PORT, target TARGET; prints the median and
 * the 90th percentile in microseconds. */
static const char client_py[] =
    "import socket,sys,time\n"
    "h,p,t,n=sys.argv[1],int(sys.argv[2]),sys.argv[3],int(sys.argv[4])\n"
    "req=('GET %s HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'%t).encode()\n"
    "ts=[]\n"
    "for i in range(n):\n"
    "  a=time.perf_counter()\n"
    "  s=socket.create_connection((h,p)); s.sendall(req)\n"
    "  while s.recv(65536): pass\n"
    "  s.close(); ts.append(time.perf_counter()-a)\n"
    "ts.sort(); print('%.0f %.0f'%(ts[len(ts)//2]*1e6, ts[len(ts)*9//10]*1e6))\n";

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

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    int mib = argc > 2 ? atoi(argv[2]) : 256;
    char up_port[16] = "";
    int pfd[2];
    if (pipe(pfd))
        return 1;
    pid_t up = fork();
    if (up == 0) {
        dup2(pfd[1], 1);
        execlp("python3", "python3", "tests/broker_upstream.py", "--log", "/dev/null",
               "--max-seconds", "300", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *upf = fdopen(pfd[0], "r");
    if (up < 0 || !upf || !fgets(up_port, sizeof(up_port), upf)) {
        fprintf(stderr, "bench: cannot start the upstream\n");
        return 1;
    }
    up_port[strcspn(up_port, "\n")] = '\0';

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
    if (eph_cidr_parse("127.0.0.1/32", &s.allow_private[0]))
        return 1;
    s.nallow_private = 1;
    s.max_response_bytes = (uint64_t)mib << 21;
    struct eph_broker_run run = {.web = true};
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
    char cmd[4096], out[256], direct[256], via[256];
    FILE *f = fopen("/tmp/ephemeral-bench-client.py", "w");
    if (!f)
        return 1;
    fputs(client_py, f);
    fclose(f);
    if (sb->ops->write_file(sb, "client.py", client_py, sizeof(client_py) - 1, 0644))
        return 1;

    snprintf(cmd, sizeof(cmd), "python3 /tmp/ephemeral-bench-client.py 127.0.0.1 %s /ok %d",
             up_port, n);
    run_host(cmd, direct, sizeof(direct));
    snprintf(cmd, sizeof(cmd), "python3 client.py 127.0.0.1 3128 http://127.0.0.1:%s/ok %d",
             up_port, n);
    run_in(sb, cmd, via, sizeof(via));

    char tdirect[64], tvia[sizeof(out)];
    snprintf(cmd, sizeof(cmd),
             "curl -s --noproxy '*' -o /dev/null -w '%%{speed_download}' "
             "'http://127.0.0.1:%s/big?n=%llu'",
             up_port, (unsigned long long)mib << 20);
    run_host(cmd, tdirect, sizeof(tdirect));
    snprintf(cmd, sizeof(cmd),
             "curl -s -p -o /dev/null -w '%%{speed_download}' 'http://127.0.0.1:%s/big?n=%llu'",
             up_port, (unsigned long long)mib << 20);
    run_in(sb, cmd, out, sizeof(out));
    snprintf(tvia, sizeof(tvia), "%s", out);

    printf("| broker | direct (host) | through the broker (sandbox) |\n|---|--:|--:|\n");
    printf("| request latency, median / p90 (us, %d requests, Python client) | %s | %s |\n", n,
           direct, via);
    printf("| CONNECT tunnel throughput (MB/s, %d MiB, curl) | %.0f | %.0f |\n", mib,
           atof(tdirect) / 1e6, atof(tvia) / 1e6);
    eph_broker_close(b);
    eph_sandbox_destroy(sb);
    eph_broker_free(b);
    kill(up, SIGTERM);
    waitpid(up, NULL, 0);
    fclose(upf);
    unlink("/tmp/ephemeral-bench-client.py");
    return 0;
}
