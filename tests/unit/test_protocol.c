/*
 * test_protocol.c - the guest protocol's codec, its decoder's refusal of hostile input, and the
 * worker-side client against a fake guest that misbehaves (garbage, floods, wrong ids, death
 * mid-frame, silence).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "guest/protocol.h"
#include "sandbox/guest_client.h"
#include "sandbox/sandbox.h"

static uint8_t frame[EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD];
static uint8_t dbuf[EPH_PROTO_MAX_PAYLOAD];

static void raw_header(uint8_t *h, uint8_t type, uint32_t id, uint32_t len)
{
    eph_proto_header_encode(h, type, 0, id, len);
}

/* Decodes bytes as a guest->host stream fed in one go; returns the first result. */
static int decode_all(const uint8_t *p, size_t n, enum eph_proto_dir from,
                      struct eph_proto_frame *f)
{
    struct eph_proto_decoder d;
    size_t used;
    eph_proto_decoder_init(&d, from, dbuf, sizeof(dbuf));
    return eph_proto_decode(&d, p, n, &used, f);
}

static void test_header_roundtrip(void **state)
{
    uint8_t h[EPH_PROTO_HEADER_SIZE];
    struct eph_proto_header out;
    raw_header(h, EPH_PROTO_EXEC_STDOUT, 0xdeadbeef, 42);
    assert_int_equal(h[0], 'E');
    assert_int_equal(h[1], 'G');
    assert_int_equal(h[2], EPH_PROTO_VERSION);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), 0);
    assert_int_equal(out.type, EPH_PROTO_EXEC_STDOUT);
    assert_int_equal(out.id, 0xdeadbeef);
    assert_int_equal(out.length, 42);
    /* Little-endian on the wire whatever the host. */
    assert_int_equal(h[8], 0xef);
    assert_int_equal(h[12], 42);
}

static void test_header_rejects(void **state)
{
    uint8_t h[EPH_PROTO_HEADER_SIZE];
    struct eph_proto_header out;

    raw_header(h, EPH_PROTO_PONG, 1, 4);
    h[0] = 'X';
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);

    raw_header(h, EPH_PROTO_PONG, 1, 4);
    h[2] = EPH_PROTO_VERSION + 1;
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);

    raw_header(h, 0x7f, 1, 4); /* unknown type */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
    raw_header(h, 0x45, 1, 4); /* reserved for the tunnel, not defined */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
    raw_header(h, EPH_PROTO_TUNNEL_LISTEN, 1, 8); /* the host's to send */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);

    /* A guest may not send requests; a host may not send output. */
    raw_header(h, EPH_PROTO_EXEC, 1, 100);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
    raw_header(h, EPH_PROTO_EXEC_STDOUT, 1, 100);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_HOST, &out), -EPROTO);

    raw_header(h, EPH_PROTO_PONG, 1, 4);
    h[4] = 1; /* flags */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
    raw_header(h, EPH_PROTO_PONG, 1, 4);
    h[7] = 0x80; /* reserved */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);

    /* Over the type's cap, and over the absolute cap. */
    raw_header(h, EPH_PROTO_EXEC_STDOUT, 1, EPH_PROTO_CHUNK + 1);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EMSGSIZE);
    raw_header(h, EPH_PROTO_EXEC, 1, 0xffffffffu);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_HOST, &out), -EMSGSIZE);
    raw_header(h, EPH_PROTO_PING, 1, EPH_PROTO_MAX_PING + 1);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_HOST, &out), -EMSGSIZE);

    /* Fixed-size payloads must have exactly their size. */
    raw_header(h, EPH_PROTO_EXEC_EXIT, 1, EPH_PROTO_EXIT_SIZE - 1);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
    raw_header(h, EPH_PROTO_EXEC_EXIT, 1, EPH_PROTO_EXIT_SIZE + 1);
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EMSGSIZE);
    raw_header(h, EPH_PROTO_EXEC_STDOUT, 1, 0); /* empty chunks are not a thing */
    assert_int_equal(eph_proto_header_parse(h, EPH_PROTO_FROM_GUEST, &out), -EPROTO);
}

static void test_decoder_byte_by_byte(void **state)
{
    struct eph_proto_decoder d;
    struct eph_proto_frame f;
    const char payload[] = "hello, world";
    int len = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_EXEC_STDOUT, 0, 7, payload,
                                   sizeof(payload) - 1);
    assert_true(len > 0);
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_GUEST, dbuf, sizeof(dbuf));
    for (int i = 0; i < len; i++) {
        size_t used = 0;
        int rc = eph_proto_decode(&d, frame + i, 1, &used, &f);
        assert_int_equal(used, 1);
        if (i < len - 1) {
            assert_int_equal(rc, 0);
            assert_int_equal(eph_proto_decoder_finish(&d), -EPROTO); /* cut here = truncated */
        } else {
            assert_int_equal(rc, 1);
        }
    }
    assert_int_equal(f.hdr.type, EPH_PROTO_EXEC_STDOUT);
    assert_int_equal(f.hdr.id, 7);
    assert_int_equal(f.hdr.length, sizeof(payload) - 1);
    assert_memory_equal(f.payload, payload, sizeof(payload) - 1);
    assert_int_equal(eph_proto_decoder_finish(&d), 0);
}

static void test_decoder_several_frames(void **state)
{
    struct eph_proto_decoder d;
    struct eph_proto_frame f;
    size_t n = 0, used;
    for (uint32_t id = 1; id <= 3; id++) {
        int len = eph_proto_raw_encode(frame + n, sizeof(frame) - n, EPH_PROTO_EXEC_STDERR, 0, id,
                                       "abc", id);
        assert_true(len > 0);
        n += (size_t)len;
    }
    int len = eph_proto_raw_encode(frame + n, sizeof(frame) - n, EPH_PROTO_OK, 0, 4, NULL, 0);
    n += (size_t)len;
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_GUEST, dbuf, sizeof(dbuf));
    size_t off = 0;
    for (uint32_t id = 1; id <= 4; id++) {
        assert_int_equal(eph_proto_decode(&d, frame + off, n - off, &used, &f), 1);
        off += used;
        assert_int_equal(f.hdr.id, id);
        assert_int_equal(f.hdr.length, id == 4 ? 0 : id);
    }
    assert_int_equal(off, n);
    assert_int_equal(eph_proto_decode(&d, frame + off, 0, &used, &f), 0);
}

static void test_decoder_sticky_and_buffer_cap(void **state)
{
    struct eph_proto_decoder d;
    struct eph_proto_frame f;
    size_t used;
    uint8_t small[8];
    uint8_t garbage[32];
    memset(garbage, 0x41, sizeof(garbage));
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_GUEST, dbuf, sizeof(dbuf));
    assert_int_equal(eph_proto_decode(&d, garbage, sizeof(garbage), &used, &f), -EPROTO);
    assert_int_equal(used, EPH_PROTO_HEADER_SIZE);
    /* Once broken, a good frame does not fix it. */
    int len = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_OK, 0, 1, NULL, 0);
    assert_int_equal(eph_proto_decode(&d, frame, (size_t)len, &used, &f), -EPROTO);
    assert_int_equal(used, 0);
    assert_int_equal(eph_proto_decoder_finish(&d), -EPROTO);
    eph_proto_decoder_reset(&d);
    assert_int_equal(eph_proto_decode(&d, frame, (size_t)len, &used, &f), 1);

    /* A payload bigger than the caller's buffer is refused before a byte of it is copied. */
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_GUEST, small, sizeof(small));
    len = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_EXEC_STDOUT, 0, 1, "0123456789", 10);
    assert_int_equal(eph_proto_decode(&d, frame, (size_t)len, &used, &f), -EMSGSIZE);
}

/* The optional live_cap at the end of an exec: absent is 0, present is read, anything else (one to
 * three bytes, or more) is refused; live frames travel from the guest only. */
static void test_exec_live_cap(void **state)
{
    struct eph_proto_exec ex;
    struct eph_proto_frame f;
    int len = eph_proto_exec_encode(frame, sizeof(frame), 9, 1500, 100, 200, "ls", "", NULL, 65536);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(eph_proto_exec_decode(f.payload, f.hdr.length, &ex), 0);
    assert_int_equal(ex.live_cap, 65536);
    uint8_t p[64];
    memcpy(p, f.payload, f.hdr.length);
    /* Without its last four bytes it is an exec without live output. */
    assert_int_equal(eph_proto_exec_decode(p, f.hdr.length - 4, &ex), 0);
    assert_int_equal(ex.live_cap, 0);
    for (size_t cut = 1; cut < 4; cut++)
        assert_int_equal(eph_proto_exec_decode(p, f.hdr.length - cut, &ex), -EPROTO);
    memset(p + f.hdr.length, 0, 4);
    assert_int_equal(eph_proto_exec_decode(p, f.hdr.length + 4, &ex), -EPROTO);
    /* exec_live_* come from the guest; a host-side decoder of the guest's frames takes them, the
     * guest's decoder of the host's does not. */
    len = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_EXEC_LIVE_STDERR, 0, 9, "abc", 3);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(f.hdr.type, EPH_PROTO_EXEC_LIVE_STDERR);
    struct eph_proto_decoder d;
    uint8_t buf[128];
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_HOST, buf, sizeof(buf));
    size_t used = 0;
    assert_int_equal(eph_proto_decode(&d, frame, (size_t)len, &used, &f), -EPROTO);
}

static void test_exec_roundtrip(void **state)
{
    const char *env[] = {"A=1", "PATH=/x", NULL};
    struct eph_proto_exec ex;
    struct eph_proto_frame f;
    int len =
        eph_proto_exec_encode(frame, sizeof(frame), 9, 1500, 100, 200, "echo 'hi'", "", env, 0);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(f.hdr.type, EPH_PROTO_EXEC);
    assert_int_equal(eph_proto_exec_decode(f.payload, f.hdr.length, &ex), 0);
    assert_int_equal(ex.timeout_ms, 1500);
    assert_int_equal(ex.stdout_cap, 100);
    assert_int_equal(ex.stderr_cap, 200);
    assert_string_equal(ex.command, "echo 'hi'");
    assert_string_equal(ex.cwd, "");
    assert_int_equal(ex.env_count, 2);
    assert_string_equal(ex.env[1], "PATH=/x");

    const char *bad_env[] = {"NOEQUALS", NULL};
    assert_int_equal(eph_proto_exec_encode(frame, sizeof(frame), 9, 1, 1, 1, "x", "", bad_env, 0),
                     -EINVAL);
    /* Too big for the caller's buffer. */
    assert_int_equal(
        eph_proto_exec_encode(frame, 40, 9, 1, 1, 1, "a long command line", "", NULL, 0),
        -EMSGSIZE);
}

/* Hand-built exec payloads with one thing wrong each. */
static size_t put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return 4;
}

static void test_exec_rejects(void **state)
{
    struct eph_proto_exec ex;
    uint8_t p[128];
    size_t n;
#define HEAD()                                                                                     \
    do {                                                                                           \
        n = 0;                                                                                     \
        n += put_u32(p + n, 1000);                                                                 \
        n += put_u32(p + n, 10);                                                                   \
        n += put_u32(p + n, 10);                                                                   \
    } while (0)

    /* Embedded NUL in the command. */
    HEAD();
    n += put_u32(p + n, 4);
    memcpy(p + n, "a\0b", 4);
    n += 4;
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, 0);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);

    /* No NUL at the end of a string. */
    HEAD();
    n += put_u32(p + n, 3);
    memcpy(p + n, "abc", 3);
    n += 3;
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, 0);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);

    /* A string length past the end of the payload. */
    HEAD();
    n += put_u32(p + n, 1000);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);
    HEAD();
    n += put_u32(p + n, 0xffffffffu);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EMSGSIZE);

    /* Too many environment entries. */
    HEAD();
    n += put_u32(p + n, 2);
    memcpy(p + n, "x", 2);
    n += 2;
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, EPH_PROTO_MAX_ENV + 1);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EMSGSIZE);

    /* An environment entry without '=', then one that starts with it. */
    HEAD();
    n += put_u32(p + n, 2);
    memcpy(p + n, "x", 2);
    n += 2;
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, 1);
    size_t at = n;
    n += put_u32(p + n, 3);
    memcpy(p + n, "AB", 3);
    n += 3;
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);
    memcpy(p + at + 4, "=B", 3);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);
    memcpy(p + at + 4, "A=", 3);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), 0);
    /* Trailing bytes after a valid payload. */
    p[n] = 0;
    assert_int_equal(eph_proto_exec_decode(p, n + 1, &ex), -EPROTO);

    /* Empty command; cwd with "..". */
    HEAD();
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, 1);
    p[n++] = 0;
    n += put_u32(p + n, 0);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);
    HEAD();
    n += put_u32(p + n, 2);
    memcpy(p + n, "x", 2);
    n += 2;
    n += put_u32(p + n, 6);
    memcpy(p + n, "a/../", 6);
    n += 6;
    n += put_u32(p + n, 0);
    assert_int_equal(eph_proto_exec_decode(p, n, &ex), -EPROTO);
#undef HEAD
}

static void test_exit_roundtrip_and_rejects(void **state)
{
    struct eph_proto_exit e = {.exit_code = 3,
                               .signal = 0,
                               .flags = EPH_PROTO_EXIT_STDOUT_TRUNCATED,
                               .duration_us = 123456789012ull,
                               .stdout_total = 1ull << 40,
                               .stderr_total = 5};
    struct eph_proto_exit out;
    struct eph_proto_frame f;
    int len = eph_proto_exit_encode(frame, sizeof(frame), 5, &e);
    assert_int_equal(len, EPH_PROTO_HEADER_SIZE + EPH_PROTO_EXIT_SIZE);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(eph_proto_exit_decode(f.payload, f.hdr.length, &out), 0);
    assert_int_equal(out.exit_code, 3);
    assert_int_equal(out.stdout_total, 1ull << 40);
    assert_int_equal(out.duration_us, 123456789012ull);

    e.exit_code = 256;
    len = eph_proto_exit_encode(frame, sizeof(frame), 5, &e);
    assert_int_equal(
        eph_proto_exit_decode(frame + EPH_PROTO_HEADER_SIZE, EPH_PROTO_EXIT_SIZE, &out), -EPROTO);
    e.exit_code = 0;
    e.signal = 65;
    len = eph_proto_exit_encode(frame, sizeof(frame), 5, &e);
    assert_int_equal(
        eph_proto_exit_decode(frame + EPH_PROTO_HEADER_SIZE, EPH_PROTO_EXIT_SIZE, &out), -EPROTO);
    e.signal = 9;
    e.flags = 0x80;
    len = eph_proto_exit_encode(frame, sizeof(frame), 5, &e);
    assert_int_equal(
        eph_proto_exit_decode(frame + EPH_PROTO_HEADER_SIZE, EPH_PROTO_EXIT_SIZE, &out), -EPROTO);
    (void)len;
}

static void test_files_and_errors(void **state)
{
    struct eph_proto_frame f;
    struct eph_proto_write_file wf;
    struct eph_proto_read_file rf;
    int len = eph_proto_write_file_encode(frame, sizeof(frame), 2, "dir/a.txt", 0644,
                                          EPH_PROTO_WRITE_APPEND, "data", 4);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(eph_proto_write_file_decode(f.payload, f.hdr.length, &wf), 0);
    assert_string_equal(wf.path, "dir/a.txt");
    assert_int_equal(wf.mode, 0644);
    assert_int_equal(wf.len, 4);
    assert_memory_equal(wf.data, "data", 4);
    assert_int_equal(
        eph_proto_write_file_encode(frame, sizeof(frame), 2, "../etc/x", 0644, 0, "", 0), -EINVAL);

    len = eph_proto_read_file_encode(frame, sizeof(frame), 3, "/tmp/x", 99);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(eph_proto_read_file_decode(f.payload, f.hdr.length, &rf), 0);
    assert_int_equal(rf.cap, 99);
    assert_string_equal(rf.path, "/tmp/x");

    int err;
    const char *msg;
    len = eph_proto_error_encode(frame, sizeof(frame), 4, -ENOENT, "no such file");
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(eph_proto_error_decode(f.payload, f.hdr.length, &err, &msg), 0);
    assert_int_equal(err, -ENOENT);
    assert_string_equal(msg, "no such file");
    /* errno 0 is not an error; a huge one is not an errno. */
    uint8_t p[16];
    put_u32(p, 0);
    put_u32(p + 4, 1);
    p[8] = 0;
    assert_int_equal(eph_proto_error_decode(p, 9, &err, &msg), -EPROTO);
    put_u32(p, 100000);
    assert_int_equal(eph_proto_error_decode(p, 9, &err, &msg), -EPROTO);
}

static void test_path_check(void **state)
{
    assert_int_equal(eph_proto_path_check("a"), 0);
    assert_int_equal(eph_proto_path_check("a/b.txt"), 0);
    assert_int_equal(eph_proto_path_check("/tmp/x"), 0);
    assert_int_equal(eph_proto_path_check("..a/b..c/..."), 0);
    const char *bad[] = {"",     "/",  "..", "../x", "a/..", "a/../b",
                         "a//b", "a/", ".",  "./a",  "/..",  "a/./b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_not_equal(eph_proto_path_check(bad[i]), 0);
    char *longp = malloc(EPH_PROTO_MAX_PATH + 2);
    memset(longp, 'a', EPH_PROTO_MAX_PATH + 1);
    longp[EPH_PROTO_MAX_PATH + 1] = '\0';
    assert_int_equal(eph_proto_path_check(longp), -ENAMETOOLONG);
    free(longp);
}

/* list_files: the request's bounds, the entries' kinds, paths and targets, list_end's flags. */
static void test_list_frames(void **state)
{
    struct eph_proto_frame f;
    uint32_t n, d;
    int len = eph_proto_list_files_encode(frame, sizeof(frame), 5, 100, 8);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(eph_proto_list_files_decode(f.payload, f.hdr.length, &n, &d), 0);
    assert_int_equal(n, 100);
    assert_int_equal(d, 8);
    /* Only the host asks; zero or huge bounds are refused both ways. */
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), -EPROTO);
    assert_int_equal(eph_proto_list_files_encode(frame, sizeof(frame), 5, 0, 8), -EINVAL);
    assert_int_equal(
        eph_proto_list_files_encode(frame, sizeof(frame), 5, EPH_PROTO_MAX_LIST_ENTRIES + 1, 8),
        -EINVAL);
    assert_int_equal(eph_proto_list_files_encode(frame, sizeof(frame), 5, 1, 0), -EINVAL);
    uint8_t p[8];
    put_u32(p, 1);
    put_u32(p + 4, EPH_PROTO_MAX_LIST_DEPTH + 1);
    assert_int_equal(eph_proto_list_files_decode(p, 8, &n, &d), -EPROTO);

    struct eph_proto_file_entry e = {.kind = EPH_PROTO_KIND_SYMLINK,
                                     .size = 11,
                                     .path = "out/link",
                                     .target = "/etc/passwd"},
                                out;
    len = eph_proto_file_entry_encode(frame, sizeof(frame), 5, &e);
    assert_true(len > 0);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(eph_proto_file_entry_decode(f.payload, f.hdr.length, &out), 0);
    assert_int_equal(out.kind, EPH_PROTO_KIND_SYMLINK);
    assert_string_equal(out.path, "out/link");
    assert_string_equal(out.target, "/etc/passwd");
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_HOST, &f), -EPROTO);

    /* Hostile entries, built by hand past the encoder's checks: each is refused. */
    struct {
        uint32_t kind;
        uint64_t size;
        const char *path, *target;
    } bad[] = {
        {9, 1, "a", ""},                                 /* unknown kind */
        {EPH_PROTO_KIND_FILE, 1, "/etc/passwd", ""},     /* absolute */
        {EPH_PROTO_KIND_FILE, 1, "../x", ""},            /* escapes */
        {EPH_PROTO_KIND_FILE, 1, "a/../../x", ""},       /* escapes */
        {EPH_PROTO_KIND_FILE, 1, "a//b", ""},            /* empty component */
        {EPH_PROTO_KIND_FILE, 1, "a\xff", ""},           /* not UTF-8 */
        {EPH_PROTO_KIND_FILE, 1, "a\xc0\xaf", ""},       /* overlong '/' */
        {EPH_PROTO_KIND_FILE, 1, "a\nb", ""},            /* control byte */
        {EPH_PROTO_KIND_FILE, 1, "a", "/etc/passwd"},    /* a target on a file */
        {EPH_PROTO_KIND_DIR, 5, "d", ""},                /* a size on a directory */
        {EPH_PROTO_KIND_SYMLINK, 0, "l", ""},            /* a symlink without a target */
        {EPH_PROTO_KIND_SYMLINK, 3, "l", "/etc/passwd"}, /* its size is not its length */
        {EPH_PROTO_KIND_SYMLINK, 2, "l", "\xed\xa0"},    /* a target that is not UTF-8 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct eph_proto_writer w;
        eph_proto_writer_init(&w, frame, sizeof(frame));
        eph_proto_put_u32(&w, bad[i].kind);
        eph_proto_put_u64(&w, bad[i].size);
        eph_proto_put_string(&w, bad[i].path, EPH_PROTO_MAX_PATH);
        eph_proto_put_string(&w, bad[i].target, EPH_PROTO_MAX_PATH);
        len = eph_proto_writer_finish(&w, EPH_PROTO_FILE_ENTRY, 0, 5);
        assert_true(len > 0);
        assert_int_equal(eph_proto_file_entry_decode(frame + EPH_PROTO_HEADER_SIZE,
                                                     (size_t)len - EPH_PROTO_HEADER_SIZE, &out),
                         -EPROTO);
    }
    /* The encoder refuses what the decoder would (the guest never sends it). */
    e.kind = EPH_PROTO_KIND_FILE;
    assert_int_equal(eph_proto_file_entry_encode(frame, sizeof(frame), 5, &e), -EINVAL);
    e.target = "";
    e.path = "../x";
    assert_int_equal(eph_proto_file_entry_encode(frame, sizeof(frame), 5, &e), -EINVAL);

    uint32_t flags, count;
    len = eph_proto_list_end_encode(frame, sizeof(frame), 5, EPH_PROTO_LIST_TRUNCATED, 3);
    assert_int_equal(decode_all(frame, (size_t)len, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(eph_proto_list_end_decode(f.payload, f.hdr.length, &flags, &count), 0);
    assert_int_equal(flags, EPH_PROTO_LIST_TRUNCATED);
    assert_int_equal(count, 3);
    put_u32(p, 2);
    assert_int_equal(eph_proto_list_end_decode(p, 8, &flags, &count), -EPROTO);
}

static void test_rel_path_and_utf8(void **state)
{
    assert_int_equal(eph_proto_rel_path_check("report.md"), 0);
    assert_int_equal(eph_proto_rel_path_check("out/caf\xc3\xa9.txt"), 0);
    assert_int_equal(eph_proto_rel_path_check("\xf0\x9f\x98\x80"), 0);
    const char *bad[] = {"/tmp/x", "..",    "a/..",     "",
                         "a\x01",  "a\x7f", "\xe2\x82", "\xf4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_not_equal(eph_proto_rel_path_check(bad[i]), 0);
    assert_true(eph_proto_utf8_valid("", 0));
    assert_false(eph_proto_utf8_valid("\xe0\x80\x80", 3)); /* overlong */
}

/* The tunnel frames (docs/BROKER.md): who may send each, exact sizes, value ranges. */
static void test_tunnel_frames(void **state)
{
    struct eph_proto_frame f;
    uint16_t port;
    uint32_t streams, v;
    int n = eph_proto_tunnel_listen_encode(frame, sizeof(frame), 7, 3128, 16);
    assert_int_equal(n, EPH_PROTO_HEADER_SIZE + 8);
    assert_int_equal(decode_all(frame, (size_t)n, EPH_PROTO_FROM_HOST, &f), 1);
    assert_int_equal(f.hdr.type, EPH_PROTO_TUNNEL_LISTEN);
    assert_int_equal(eph_proto_tunnel_listen_decode(f.payload, f.hdr.length, &port, &streams), 0);
    assert_int_equal(port, 3128);
    assert_int_equal(streams, 16);
    /* Only the host opens the listener, only the guest opens a stream. */
    assert_int_equal(decode_all(frame, (size_t)n, EPH_PROTO_FROM_GUEST, &f), -EPROTO);
    n = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_OPEN, 0, 3, NULL, 0);
    assert_int_equal(decode_all(frame, (size_t)n, EPH_PROTO_FROM_GUEST, &f), 1);
    assert_int_equal(f.hdr.id, 3);
    assert_int_equal(decode_all(frame, (size_t)n, EPH_PROTO_FROM_HOST, &f), -EPROTO);
    /* Data, window and close travel both ways. */
    static const enum eph_proto_dir dirs[] = {EPH_PROTO_FROM_HOST, EPH_PROTO_FROM_GUEST};
    for (size_t i = 0; i < 2; i++) {
        n = eph_proto_raw_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_DATA, 0, 3, "abc", 3);
        assert_int_equal(decode_all(frame, (size_t)n, dirs[i], &f), 1);
        assert_int_equal(f.hdr.length, 3);
        n = eph_proto_tunnel_u32_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_WINDOW, 3, 4096);
        assert_int_equal(decode_all(frame, (size_t)n, dirs[i], &f), 1);
        assert_int_equal(eph_proto_tunnel_u32_decode(f.hdr.type, f.payload, f.hdr.length, &v), 0);
        assert_int_equal(v, 4096);
        n = eph_proto_tunnel_u32_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_CLOSE, 3,
                                        EPH_PROTO_CLOSE_RESET);
        assert_int_equal(decode_all(frame, (size_t)n, dirs[i], &f), 1);
        assert_int_equal(eph_proto_tunnel_u32_decode(f.hdr.type, f.payload, f.hdr.length, &v), 0);
        assert_int_equal(v, EPH_PROTO_CLOSE_RESET);
    }
    /* Empty data, oversized data, a window or close of the wrong size: refused by the header. */
    raw_header(frame, EPH_PROTO_TUNNEL_DATA, 3, 0);
    assert_int_equal(decode_all(frame, EPH_PROTO_HEADER_SIZE, EPH_PROTO_FROM_GUEST, &f), -EPROTO);
    raw_header(frame, EPH_PROTO_TUNNEL_DATA, 3, EPH_PROTO_CHUNK + 1);
    assert_int_equal(decode_all(frame, EPH_PROTO_HEADER_SIZE, EPH_PROTO_FROM_GUEST, &f), -EMSGSIZE);
    raw_header(frame, EPH_PROTO_TUNNEL_WINDOW, 3, 8);
    assert_int_equal(decode_all(frame, EPH_PROTO_HEADER_SIZE, EPH_PROTO_FROM_GUEST, &f), -EMSGSIZE);
    raw_header(frame, EPH_PROTO_TUNNEL_OPEN, 3, 1);
    assert_int_equal(decode_all(frame, EPH_PROTO_HEADER_SIZE, EPH_PROTO_FROM_GUEST, &f), -EMSGSIZE);
    /* Values out of range. */
    uint8_t p[8] = {0};
    assert_int_equal(eph_proto_tunnel_u32_decode(EPH_PROTO_TUNNEL_WINDOW, p, 4, &v), -EPROTO);
    p[0] = 1;
    assert_int_equal(eph_proto_tunnel_u32_decode(EPH_PROTO_TUNNEL_WINDOW, p, 4, &v), 0);
    p[0] = 0, p[2] = 0x10; /* 1 MiB: more than a window */
    assert_int_equal(eph_proto_tunnel_u32_decode(EPH_PROTO_TUNNEL_WINDOW, p, 4, &v), -EPROTO);
    p[0] = 3, p[2] = 0;
    assert_int_equal(eph_proto_tunnel_u32_decode(EPH_PROTO_TUNNEL_CLOSE, p, 4, &v), -EPROTO);
    assert_int_equal(eph_proto_tunnel_u32_decode(EPH_PROTO_TUNNEL_CLOSE, p, 3, &v), -EPROTO);
    assert_int_equal(
        eph_proto_tunnel_u32_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_WINDOW, 3, 0), -EINVAL);
    assert_int_equal(eph_proto_tunnel_u32_encode(frame, sizeof(frame), EPH_PROTO_TUNNEL_DATA, 3, 1),
                     -EINVAL);
    memset(p, 0, sizeof(p));
    assert_int_equal(eph_proto_tunnel_listen_decode(p, 8, &port, &streams), -EPROTO);
    p[0] = 0x38, p[1] = 0x0c, p[4] = 1;
    assert_int_equal(eph_proto_tunnel_listen_decode(p, 8, &port, &streams), 0);
    p[2] = 1; /* port 65536 + 3128 */
    assert_int_equal(eph_proto_tunnel_listen_decode(p, 8, &port, &streams), -EPROTO);
    p[2] = 0, p[5] = 0x10; /* 4097 streams */
    assert_int_equal(eph_proto_tunnel_listen_decode(p, 8, &port, &streams), -EPROTO);
    assert_int_equal(eph_proto_tunnel_listen_encode(frame, sizeof(frame), 1, 0, 1), -EINVAL);
}

/* ---- the client against a fake guest ------------------------------------------------------ */

struct fake {
    int fd;
    uint8_t *script;
    size_t len;
    bool read_request; /* read one request before answering */
    bool hang_up;      /* close when done, else stay silent */
    int done_fd;       /* written to when the test is over, so a silent fake can exit */
    int wrote_fd;      /* when > 0: written to once the whole script is written */
};

static void *fake_guest(void *arg)
{
    struct fake *fk = arg;
    if (fk->read_request) {
        uint8_t tmp[4096];
        if (read(fk->fd, tmp, sizeof(tmp)) <= 0)
            fk->len = 0;
    }
    size_t off = 0;
    while (off < fk->len) {
        ssize_t w = write(fk->fd, fk->script + off, fk->len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (fk->wrote_fd > 0 && write(fk->wrote_fd, "w", 1) != 1)
        fk->len = 0;
    if (!fk->hang_up) {
        char c;
        if (read(fk->done_fd, &c, 1) != 1)
            fk->len = 0;
    }
    close(fk->fd);
    return NULL;
}

/* Runs client_op against a fake guest that sends script; returns the op's result. */
enum op { OP_HELLO, OP_PING, OP_EXEC, OP_LIST };

/* OP_LIST: the listing the client made, and the cap it asked with. */
static struct eph_sandbox_listing fake_listing;
static uint32_t fake_list_max = 10;

/* An exec's live bytes (run_fake with fake_live_cap set): what on_live was given. */
static uint32_t fake_live_cap;
static char fake_live[256];
static size_t fake_live_len;

static void fake_on_live(void *arg, int stream, const void *data, size_t len)
{
    (void)arg;
    if (fake_live_len + len + 1 < sizeof(fake_live)) {
        fake_live[fake_live_len++] = stream == 1 ? 'o' : 'e';
        memcpy(fake_live + fake_live_len, data, len);
        fake_live_len += len;
    }
}

static int run_fake(uint8_t *script, size_t len, bool hang_up, enum op op, uint32_t cap,
                    struct eph_exec_result *res_out)
{
    int sv[2], done[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe(done), 0);
    struct fake fk = {.fd = sv[1],
                      .script = script,
                      .len = len,
                      .read_request = op != OP_HELLO,
                      .hang_up = hang_up,
                      .done_fd = done[0]};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fake_guest, &fk), 0);
    struct eph_guest_client c;
    assert_int_equal(eph_guest_client_init(&c, sv[0]), 0);
    int rc;
    uint64_t deadline = eph_clock_mono_ns() + 300u * 1000000u;
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    if (op == OP_HELLO) {
        rc = eph_guest_client_hello(&c, deadline);
    } else if (op == OP_PING) {
        rc = eph_guest_client_ping(&c, deadline);
    } else if (op == OP_LIST) {
        rc = eph_guest_client_list_files(&c, fake_list_max, 8, &fake_listing, deadline);
    } else {
        struct eph_exec_request req = {
            .command = "true", .timeout_ms = 1, .stdout_cap = cap, .stderr_cap = cap};
        if (fake_live_cap) {
            req.on_live = fake_on_live;
            req.live_cap = fake_live_cap;
        }
        rc = eph_guest_client_exec(&c, &req, &res);
    }
    /* A broken client stays broken. */
    if (rc)
        assert_int_equal(eph_guest_client_ping(&c, deadline), rc);
    assert_int_equal(write(done[1], "x", 1), 1);
    eph_guest_client_release(&c);
    pthread_join(t, NULL);
    close(done[0]);
    close(done[1]);
    if (res_out)
        *res_out = res;
    else
        eph_exec_result_release(&res);
    return rc;
}

static size_t hello(uint8_t *p)
{
    return (size_t)eph_proto_hello_encode(p, 64, 1);
}

static void test_client_hello(void **state)
{
    uint8_t s[256];
    size_t n = hello(s);
    assert_int_equal(run_fake(s, n, true, OP_HELLO, 0, NULL), 0);
    /* A hello of another version. */
    s[EPH_PROTO_HEADER_SIZE] = 2;
    assert_int_equal(run_fake(s, n, true, OP_HELLO, 0, NULL), -EPROTO);
    /* Something else first. */
    n = (size_t)eph_proto_raw_encode(s, sizeof(s), EPH_PROTO_OK, 0, 0, NULL, 0);
    assert_int_equal(run_fake(s, n, true, OP_HELLO, 0, NULL), -EPROTO);
}

static void test_client_garbage_and_death(void **state)
{
    uint8_t s[256];
    memset(s, 0xff, sizeof(s));
    assert_int_equal(run_fake(s, sizeof(s), true, OP_PING, 0, NULL), -EPROTO);
    /* Dies mid-frame: a header promising 40 bytes, then 3 of them. */
    raw_header(s, EPH_PROTO_PONG, 1, 40);
    assert_int_equal(run_fake(s, EPH_PROTO_HEADER_SIZE + 3, true, OP_PING, 0, NULL), -EPROTO);
    /* Dies between frames. */
    assert_int_equal(run_fake(s, 0, true, OP_PING, 0, NULL), -EPIPE);
    /* Says nothing at all: the deadline ends the wait. */
    assert_int_equal(run_fake(s, 0, false, OP_PING, 0, NULL), -ETIMEDOUT);
    /* A reply to a request that was never made. */
    size_t n = (size_t)eph_proto_raw_encode(s, sizeof(s), EPH_PROTO_PONG, 0, 77, "x", 1);
    assert_int_equal(run_fake(s, n, true, OP_PING, 0, NULL), -EPROTO);
    /* The right id, the wrong answer. */
    n = (size_t)eph_proto_raw_encode(s, sizeof(s), EPH_PROTO_PONG, 0, 1, "x", 1);
    assert_int_equal(run_fake(s, n, true, OP_PING, 0, NULL), -EPROTO);
}

/* Live bytes: given to on_live in order, stream by stream, when asked; not asked, or past the
 * budget asked, they are a guest that does not follow the protocol. */
static void test_client_exec_live(void **state)
{
    static uint8_t s[4096];
    size_t n = 0;
    n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_STDOUT, 0, 1, "head", 4);
    n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_LIVE_STDOUT, 0, 1, "abc",
                                      3);
    n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_LIVE_STDERR, 0, 1, "de",
                                      2);
    struct eph_proto_exit e = {.stdout_total = 7, .stderr_total = 2};
    n += (size_t)eph_proto_exit_encode(s + n, sizeof(s) - n, 1, &e);
    struct eph_exec_result res;
    fake_live_cap = 5;
    fake_live_len = 0;
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 16, &res), 0);
    assert_int_equal(fake_live_len, 7);
    assert_memory_equal(fake_live, "oabcede", 7);
    /* Live bytes are not the result's. */
    assert_int_equal(res.out.len, 4);
    assert_int_equal(res.err.len, 0);
    eph_exec_result_release(&res);
    /* One byte past the budget. */
    fake_live_cap = 4;
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 16, NULL), -EPROTO);
    /* Not asked at all. */
    fake_live_cap = 0;
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 16, NULL), -EPROTO);
}

static void test_client_exec(void **state)
{
    static uint8_t s[1 << 20];
    size_t n = 0;
    struct eph_exec_result res;
    n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_STDOUT, 0, 1, "out", 3);
    n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_STDERR, 0, 1, "err!", 4);
    struct eph_proto_exit e = {.exit_code = 0,
                               .signal = 9,
                               .flags = EPH_PROTO_EXIT_TIMED_OUT | EPH_PROTO_EXIT_STDOUT_TRUNCATED,
                               .stdout_total = 1000,
                               .stderr_total = 1 /* a lie: 4 came */};
    n += (size_t)eph_proto_exit_encode(s + n, sizeof(s) - n, 1, &e);
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 16, &res), 0);
    assert_int_equal(res.out.len, 3);
    assert_memory_equal(res.out.data, "out", 3);
    assert_int_equal(res.err.len, 4);
    assert_int_equal(res.signal, 9);
    assert_true(res.timed_out);
    assert_int_equal(res.stdout_total, 1000);
    assert_int_equal(res.stderr_total, 4);
    eph_exec_result_release(&res);

    /* A flood past the cap the guest was given: refused, and the result never exceeds the cap. */
    n = 0;
    for (int i = 0; i < 64; i++)
        n += (size_t)eph_proto_raw_encode(s + n, sizeof(s) - n, EPH_PROTO_EXEC_STDOUT, 0, 1,
                                          "0123456789abcdef", 16);
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 100, &res), -EPROTO);
    assert_true(res.out.len <= 100);
    eph_exec_result_release(&res);

    /* An exit frame that is the right size but says nonsense. */
    n = 0;
    e.signal = 0;
    e.exit_code = -5;
    n += (size_t)eph_proto_exit_encode(s + n, sizeof(s) - n, 1, &e);
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 100, NULL), -EPROTO);

    /* A request-type frame from the guest. */
    n = (size_t)eph_proto_raw_encode(s, sizeof(s), EPH_PROTO_OK, 0, 1, NULL, 0);
    raw_header(s, EPH_PROTO_EXEC, 1, 0);
    assert_int_equal(run_fake(s, n, true, OP_EXEC, 100, NULL), -EPROTO);
}

/* A listing from a fake guest: entries come through checked; a hostile one, more than asked for,
 * or a count that lies breaks the client and leaves nothing behind. */
static void test_client_list_files(void **state)
{
    static uint8_t s[65536];
    size_t n = 0;
    struct eph_proto_file_entry e1 = {.kind = EPH_PROTO_KIND_FILE, .size = 4, .path = "a.txt"};
    struct eph_proto_file_entry e2 = {.kind = EPH_PROTO_KIND_DIR, .path = "d"};
    struct eph_proto_file_entry e3 = {
        .kind = EPH_PROTO_KIND_SYMLINK, .size = 11, .path = "d/l", .target = "/etc/passwd"};
    n += (size_t)eph_proto_file_entry_encode(s + n, sizeof(s) - n, 1, &e1);
    n += (size_t)eph_proto_file_entry_encode(s + n, sizeof(s) - n, 1, &e2);
    n += (size_t)eph_proto_file_entry_encode(s + n, sizeof(s) - n, 1, &e3);
    size_t entries = n;
    n += (size_t)eph_proto_list_end_encode(s + n, sizeof(s) - n, 1, EPH_PROTO_LIST_TRUNCATED, 3);
    assert_int_equal(run_fake(s, n, true, OP_LIST, 0, NULL), 0);
    assert_int_equal(fake_listing.n, 3);
    assert_true(fake_listing.truncated);
    assert_string_equal(fake_listing.v[0].path, "a.txt");
    assert_int_equal(fake_listing.v[0].type, EPH_SANDBOX_FILE);
    assert_int_equal(fake_listing.v[0].size, 4);
    assert_null(fake_listing.v[0].target);
    assert_int_equal(fake_listing.v[1].type, EPH_SANDBOX_DIR);
    assert_int_equal(fake_listing.v[2].type, EPH_SANDBOX_SYMLINK);
    assert_string_equal(fake_listing.v[2].target, "/etc/passwd");
    eph_sandbox_listing_release(&fake_listing);

    /* list_end counts 2 where 3 came. */
    n = entries;
    n += (size_t)eph_proto_list_end_encode(s + n, sizeof(s) - n, 1, 0, 2);
    assert_int_equal(run_fake(s, n, true, OP_LIST, 0, NULL), -EPROTO);
    assert_int_equal(fake_listing.n, 0);

    /* More entries than the cap asked for. */
    fake_list_max = 2;
    n = entries;
    n += (size_t)eph_proto_list_end_encode(s + n, sizeof(s) - n, 1, 0, 3);
    assert_int_equal(run_fake(s, n, true, OP_LIST, 0, NULL), -EPROTO);
    assert_int_equal(fake_listing.n, 0);
    fake_list_max = 10;

    /* An absolute path, past the guest's encoder. */
    struct eph_proto_writer w;
    eph_proto_writer_init(&w, s, sizeof(s));
    eph_proto_put_u32(&w, EPH_PROTO_KIND_FILE);
    eph_proto_put_u64(&w, 1);
    eph_proto_put_string(&w, "/etc/shadow", EPH_PROTO_MAX_PATH);
    eph_proto_put_string(&w, "", EPH_PROTO_MAX_PATH);
    n = (size_t)eph_proto_writer_finish(&w, EPH_PROTO_FILE_ENTRY, 0, 1);
    n += (size_t)eph_proto_list_end_encode(s + n, sizeof(s) - n, 1, 0, 1);
    assert_int_equal(run_fake(s, n, true, OP_LIST, 0, NULL), -EPROTO);
    assert_int_equal(fake_listing.n, 0);
}

/* A slow caller: while it does not take its replies, what the host holds stays bounded; the
 * guest waits (its writes block) and everything arrives whole and in order once the caller goes
 * on. Without a tunnel the caller drives the channel, so nothing is read while it is away; with
 * one, the channel thread reads on and stops once one largest frame's worth waits. */
#define FLOOD_FRAMES 64u
#define FLOOD_CHUNK 65536u

struct slow {
    struct eph_guest_client *c;
    int wrote_fd;    /* readable once the guest has written everything */
    bool guest_done; /* it had, while the caller stalled */
    size_t pieces;
    size_t max_queued;
    uint8_t next; /* the pattern byte expected next */
    bool in_order;
};

static void slow_on_output(void *arg, int stream, const void *data, size_t len)
{
    struct slow *sl = arg;
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++, sl->next++)
        if (p[i] != sl->next)
            sl->in_order = false;
    if (sl->pieces++ != 0)
        return;
    /* The first piece: with a channel thread, stall until it has queued all it may (it
     * broadcasts the condition at each frame it queues), then look at how much that is. Without
     * one, nobody reads while the caller is away: what is queued is what its last read brought. */
    struct eph_guest_client *c = sl->c;
    uint64_t deadline = eph_clock_mono_ns() + 20ull * 1000000000u;
    struct timespec until = {.tv_sec = (time_t)(deadline / 1000000000u),
                             .tv_nsec = (long)(deadline % 1000000000u)};
    pthread_mutex_lock(&c->mu);
    while (c->running && c->queued < EPH_PROTO_MAX_PAYLOAD && !c->broken &&
           pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
        ;
    sl->max_queued = c->queued;
    pthread_mutex_unlock(&c->mu);
    /* The guest must now be stuck: its writes wait for the host, which waits for the caller. It
     * cannot finish however long this waits (a host that kept reading lets it finish at once). */
    struct pollfd w = {.fd = sl->wrote_fd, .events = POLLIN};
    sl->guest_done = poll(&w, 1, 2000) == 1;
}

static int refuse_stream(void *arg, uint32_t stream, int fd)
{
    (void)arg;
    (void)stream;
    close(fd);
    return -1;
}

static void slow_caller(bool tunnel)
{
    size_t flen = EPH_PROTO_HEADER_SIZE + FLOOD_CHUNK;
    size_t len = FLOOD_FRAMES * flen + 128;
    uint8_t *script = malloc(len), chunk[FLOOD_CHUNK];
    assert_non_null(script);
    size_t n = 0;
    uint8_t b = 0;
    /* With a tunnel, request 1 is its listen (answered first) and the command is request 2. */
    uint32_t id = tunnel ? 2 : 1;
    if (tunnel)
        n += (size_t)eph_proto_raw_encode(script, len, EPH_PROTO_OK, 0, 1, NULL, 0);
    for (unsigned i = 0; i < FLOOD_FRAMES; i++) {
        for (size_t k = 0; k < FLOOD_CHUNK; k++)
            chunk[k] = b++;
        n += (size_t)eph_proto_raw_encode(script + n, len - n, EPH_PROTO_EXEC_STDOUT, 0, id, chunk,
                                          FLOOD_CHUNK);
    }
    struct eph_proto_exit e = {.stdout_total = (uint64_t)FLOOD_FRAMES * FLOOD_CHUNK};
    n += (size_t)eph_proto_exit_encode(script + n, len - n, id, &e);

    int sv[2], done[2], wrote[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe(done), 0);
    assert_int_equal(pipe(wrote), 0);
    struct fake fk = {.fd = sv[1],
                      .script = script,
                      .len = n,
                      .read_request = true,
                      .done_fd = done[0],
                      .wrote_fd = wrote[1]};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fake_guest, &fk), 0);
    struct eph_guest_client c;
    assert_int_equal(eph_guest_client_init(&c, sv[0]), 0);
    struct slow sl = {.c = &c, .wrote_fd = wrote[0], .in_order = true};
    struct eph_exec_request req = {.command = "flood",
                                   .timeout_ms = 20000,
                                   .stdout_cap = FLOOD_FRAMES * FLOOD_CHUNK,
                                   .stderr_cap = 16,
                                   .on_output = slow_on_output,
                                   .on_output_arg = &sl};
    if (tunnel) {
        struct eph_sandbox_tunnel tc = {.port = 3128, .max_streams = 1, .on_stream = refuse_stream};
        assert_int_equal(
            eph_guest_client_open_tunnel(&c, &tc, eph_clock_mono_ns() + 20ull * 1000000000u), 0);
    }
    assert_int_equal(c.running, tunnel);
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    assert_int_equal(eph_guest_client_exec(&c, &req, &res), 0);
    if (tunnel) /* it did fill (the caller was slow) */
        assert_true(sl.max_queued >= EPH_PROTO_MAX_PAYLOAD);
    /* and no more than one more frame came in meanwhile (none, with no thread to read it). */
    assert_true(sl.max_queued <= (tunnel ? EPH_PROTO_MAX_PAYLOAD : 0) + 2 * flen + 4096);
    assert_false(sl.guest_done);
    assert_int_equal(res.out.len, (size_t)FLOOD_FRAMES * FLOOD_CHUNK);
    assert_true(sl.in_order);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    assert_int_equal(write(done[1], "x", 1), 1);
    eph_guest_client_release(&c);
    pthread_join(t, NULL);
    close(done[0]);
    close(done[1]);
    close(wrote[0]);
    close(wrote[1]);
    free(script);
}

static void test_client_slow_caller(void **state)
{
    slow_caller(false);
}

static void test_client_slow_caller_with_tunnel(void **state)
{
    slow_caller(true);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_roundtrip),
        cmocka_unit_test(test_header_rejects),
        cmocka_unit_test(test_decoder_byte_by_byte),
        cmocka_unit_test(test_decoder_several_frames),
        cmocka_unit_test(test_decoder_sticky_and_buffer_cap),
        cmocka_unit_test(test_exec_roundtrip),
        cmocka_unit_test(test_exec_live_cap),
        cmocka_unit_test(test_exec_rejects),
        cmocka_unit_test(test_exit_roundtrip_and_rejects),
        cmocka_unit_test(test_files_and_errors),
        cmocka_unit_test(test_path_check),
        cmocka_unit_test(test_tunnel_frames),
        cmocka_unit_test(test_list_frames),
        cmocka_unit_test(test_rel_path_and_utf8),
        cmocka_unit_test(test_client_list_files),
        cmocka_unit_test(test_client_hello),
        cmocka_unit_test(test_client_garbage_and_death),
        cmocka_unit_test(test_client_exec),
        cmocka_unit_test(test_client_exec_live),
        cmocka_unit_test(test_client_slow_caller),
        cmocka_unit_test(test_client_slow_caller_with_tunnel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
