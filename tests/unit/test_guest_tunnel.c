/* The host end of the broker tunnel (docs/BROKER.md) against forged frames: a stream opens on the
 * caller's socket, data crosses both ways within the credit and is granted back as it is
 * written, data beyond the credit resets the stream, a second open of a live id breaks the
 * channel, the meter cuts a stream at the byte, and the cap on streams holds. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/guest_tunnel.h"

static int stream_fds[8];
static int nstreams;
static size_t meter_left = (size_t)-1;

static int on_stream(void *arg, uint32_t stream, int fd)
{
    stream_fds[nstreams++] = fd;
    return 0;
}

static size_t on_bytes(void *arg, uint32_t stream, size_t n)
{
    size_t k = n < meter_left ? n : meter_left;
    meter_left -= k;
    return k;
}

static uint8_t payload[EPH_PROTO_CHUNK];

static int frame(struct eph_guest_tunnel *t, uint8_t type, uint32_t id, const void *p, size_t n)
{
    struct eph_proto_frame f = {.hdr = {.type = type, .id = id, .length = (uint32_t)n},
                                .payload = p};
    return eph_guest_tunnel_frame(t, &f);
}

static int u32frame(struct eph_guest_tunnel *t, uint8_t type, uint32_t id, uint32_t v)
{
    uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return frame(t, type, id, p, 4);
}

/* Decodes the tunnel's queued frames; returns how many of type (and their bytes in *bytes). */
static int queued(struct eph_guest_tunnel *t, uint8_t type, uint32_t id, size_t *bytes,
                  uint32_t *last_value)
{
    static uint8_t buf[EPH_PROTO_MAX_PAYLOAD];
    struct eph_buf *q = eph_guest_tunnel_out(t);
    struct eph_proto_decoder d;
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_HOST, buf, sizeof(buf));
    size_t off = 0;
    int count = 0;
    if (bytes)
        *bytes = 0;
    while (off < q->len) {
        struct eph_proto_frame f;
        size_t used;
        int rc = eph_proto_decode(&d, q->data + off, q->len - off, &used, &f);
        off += used;
        assert_true(rc >= 0);
        if (rc == 1 && f.hdr.type == type && f.hdr.id == id) {
            count++;
            if (bytes)
                *bytes += f.hdr.length;
            if (last_value && f.hdr.length == 4)
                *last_value = (uint32_t)f.payload[0] | (uint32_t)f.payload[1] << 8 |
                              (uint32_t)f.payload[2] << 16 | (uint32_t)f.payload[3] << 24;
        }
    }
    return count;
}

static struct eph_guest_tunnel *make(uint32_t max)
{
    struct eph_sandbox_tunnel cfg = {
        .port = 3128, .max_streams = max, .on_stream = on_stream, .on_bytes = on_bytes};
    struct eph_guest_tunnel *t;
    nstreams = 0;
    meter_left = (size_t)-1;
    assert_int_equal(eph_guest_tunnel_new(&cfg, &t), 0);
    return t;
}

/* Serves the tunnel's sockets once (what the guest client does while it waits). */
static void service(struct eph_guest_tunnel *t)
{
    struct pollfd pfd[EPH_GUEST_TUNNEL_MAX_STREAMS];
    size_t n = eph_guest_tunnel_pollfds(t, pfd, EPH_GUEST_TUNNEL_MAX_STREAMS);
    if (poll(pfd, n, 1000) > 0)
        eph_guest_tunnel_service(t, pfd, n);
}

static void test_both_ways(void **state)
{
    struct eph_guest_tunnel *t = make(4);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    assert_int_equal(nstreams, 1);
    assert_int_equal(eph_guest_tunnel_streams(t), 1);
    /* Guest -> broker: written to the socket, credit granted back. */
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_DATA, 1, "GET / HTTP/1.1\r\n\r\n", 18), 0);
    char got[64];
    assert_int_equal(read(stream_fds[0], got, sizeof(got)), 18);
    uint32_t grant = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_WINDOW, 1, NULL, &grant), 1);
    assert_int_equal(grant, 18);
    /* Broker -> guest: read from the socket into data frames. */
    assert_int_equal(write(stream_fds[0], "HTTP/1.1 200 OK\r\n\r\n", 19), 19);
    service(t);
    size_t bytes;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_DATA, 1, &bytes, NULL), 1);
    assert_int_equal(bytes, 19);
    /* The broker closes its side: a half close goes to the guest. */
    close(stream_fds[0]);
    service(t);
    uint32_t how = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_CLOSE, 1, NULL, &how), 1);
    assert_int_equal(how, EPH_PROTO_CLOSE_WRITE);
    eph_guest_tunnel_free(t);
}

static void test_credit_enforced(void **state)
{
    struct eph_guest_tunnel *t = make(4);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    /* Fill the socket so nothing more can be written, then send past the window. */
    int sz = 4096;
    setsockopt(stream_fds[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    memset(payload, 'x', sizeof(payload));
    size_t sent = 0;
    int reset = 0;
    for (int i = 0; i < 8 && !reset; i++) {
        assert_int_equal(frame(t, EPH_PROTO_TUNNEL_DATA, 1, payload, sizeof(payload)), 0);
        sent += sizeof(payload);
        reset = eph_guest_tunnel_streams(t) == 0;
    }
    assert_true(reset);
    assert_true(sent > EPH_PROTO_TUNNEL_WINDOW_SIZE);
    uint32_t how = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_CLOSE, 1, NULL, &how), 1);
    assert_int_equal(how, EPH_PROTO_CLOSE_RESET);
    /* Frames for the reset stream are dropped quietly. */
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_DATA, 1, "x", 1), 0);
    close(stream_fds[0]);
    eph_guest_tunnel_free(t);
}

static void test_protocol_errors(void **state)
{
    struct eph_guest_tunnel *t = make(4);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), -EPROTO);
    /* A window that would overflow the credit is clamped, not trusted. */
    assert_int_equal(u32frame(t, EPH_PROTO_TUNNEL_WINDOW, 1, EPH_PROTO_TUNNEL_WINDOW_SIZE), 0);
    /* A reset from the guest ends the stream. */
    assert_int_equal(u32frame(t, EPH_PROTO_TUNNEL_CLOSE, 1, EPH_PROTO_CLOSE_RESET), 0);
    assert_int_equal(eph_guest_tunnel_streams(t), 0);
    close(stream_fds[0]);
    eph_guest_tunnel_free(t);
}

/* A broker that answers and hangs up before the request arrives (a refusal): the request that
 * follows finds its end closed, and the answer still reaches the guest, before the reset. */
static int answer_and_close(void *arg, uint32_t stream, int fd)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n\r\n";
    assert_int_equal(write(fd, busy, sizeof(busy) - 1), (ssize_t)(sizeof(busy) - 1));
    close(fd);
    return 0;
}

static void test_answer_before_hangup(void **state)
{
    struct eph_sandbox_tunnel cfg = {.port = 3128, .max_streams = 4, .on_stream = answer_and_close};
    struct eph_guest_tunnel *t;
    assert_int_equal(eph_guest_tunnel_new(&cfg, &t), 0);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_DATA, 1, "GET / HTTP/1.1\r\n\r\n", 18), 0);
    assert_int_equal(eph_guest_tunnel_streams(t), 0);
    size_t bytes;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_DATA, 1, &bytes, NULL), 1);
    assert_int_equal(bytes, 36);
    uint32_t how = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_CLOSE, 1, NULL, &how), 1);
    assert_int_equal(how, EPH_PROTO_CLOSE_RESET);
    /* In that order: the answer's frame first. */
    static uint8_t buf[EPH_PROTO_MAX_PAYLOAD];
    struct eph_buf *q = eph_guest_tunnel_out(t);
    struct eph_proto_decoder d;
    struct eph_proto_frame f;
    size_t used;
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_HOST, buf, sizeof(buf));
    assert_int_equal(eph_proto_decode(&d, q->data, q->len, &used, &f), 1);
    assert_int_equal(f.hdr.type, EPH_PROTO_TUNNEL_DATA);
    eph_guest_tunnel_free(t);
}

static void test_cap(void **state)
{
    struct eph_guest_tunnel *t = make(2);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 3, NULL, 0), 0);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 5, NULL, 0), 0);
    assert_int_equal(nstreams, 2); /* the third never reached the broker */
    uint32_t how = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_CLOSE, 5, NULL, &how), 1);
    assert_int_equal(how, EPH_PROTO_CLOSE_RESET);
    close(stream_fds[0]);
    close(stream_fds[1]);
    eph_guest_tunnel_free(t);
}

/* The meter cuts at the byte: what it pays for crosses, the stream is reset after it. */
static void test_meter_cut(void **state)
{
    struct eph_guest_tunnel *t = make(4);
    assert_int_equal(frame(t, EPH_PROTO_TUNNEL_OPEN, 1, NULL, 0), 0);
    meter_left = 10;
    assert_int_equal(write(stream_fds[0], "0123456789abcdef", 16), 16);
    service(t);
    size_t bytes;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_DATA, 1, &bytes, NULL), 1);
    assert_int_equal(bytes, 10);
    uint32_t how = 0;
    assert_int_equal(queued(t, EPH_PROTO_TUNNEL_CLOSE, 1, NULL, &how), 1);
    assert_int_equal(how, EPH_PROTO_CLOSE_RESET);
    assert_int_equal(eph_guest_tunnel_streams(t), 0);
    close(stream_fds[0]);
    eph_guest_tunnel_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_ways),       cmocka_unit_test(test_credit_enforced),
        cmocka_unit_test(test_protocol_errors), cmocka_unit_test(test_cap),
        cmocka_unit_test(test_meter_cut),       cmocka_unit_test(test_answer_before_hangup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
