/*
 * fuzz_guest_protocol.c - libFuzzer driver for the worker side's view of the guest protocol: the
 * bytes are what a hostile guest sends. They are fed to the decoder in splits chosen by the input
 * itself, and every frame that comes out goes through the payload parser for its type, as the
 * worker would. The decoder must never read or write out of bounds, never return a frame over its
 * caps, and never accept a host-side type.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/protocol.h"

static uint8_t payload[EPH_PROTO_MAX_PAYLOAD];

static void parse(const struct eph_proto_frame *f)
{
    if (f->hdr.length > eph_proto_type_cap(f->hdr.type) ||
        !(eph_proto_type_dir(f->hdr.type) & EPH_PROTO_FROM_GUEST))
        abort();
    switch (f->hdr.type) {
    case EPH_PROTO_EXEC_EXIT: {
        struct eph_proto_exit e;
        (void)eph_proto_exit_decode(f->payload, f->hdr.length, &e);
        break;
    }
    case EPH_PROTO_ERROR: {
        int err;
        const char *msg;
        if (eph_proto_error_decode(f->payload, f->hdr.length, &err, &msg) == 0 &&
            (err >= 0 || strlen(msg) > EPH_PROTO_MAX_ERROR_MSG))
            abort();
        break;
    }
    case EPH_PROTO_HELLO: {
        uint32_t v, pid;
        (void)eph_proto_hello_decode(f->payload, f->hdr.length, &v, &pid);
        break;
    }
    case EPH_PROTO_TUNNEL_WINDOW:
    case EPH_PROTO_TUNNEL_CLOSE: {
        uint32_t v;
        if (eph_proto_tunnel_u32_decode(f->hdr.type, f->payload, f->hdr.length, &v) == 0 &&
            (v == 0 ||
             (f->hdr.type == EPH_PROTO_TUNNEL_WINDOW && v > EPH_PROTO_TUNNEL_WINDOW_SIZE) ||
             (f->hdr.type == EPH_PROTO_TUNNEL_CLOSE && v != EPH_PROTO_CLOSE_WRITE &&
              v != EPH_PROTO_CLOSE_RESET)))
            abort();
        break;
    }
    case EPH_PROTO_TUNNEL_DATA:
        if (f->hdr.length == 0 || f->hdr.length > EPH_PROTO_CHUNK)
            abort();
        break;
    default:
        break;
    }
}

/* The host side's parsers too (the guest runs them on what the host sends; a bug there would be
 * the guest's crash, which the fuzzer should find just the same). */
static void parse_host(const uint8_t *data, size_t size)
{
    struct eph_proto_exec ex;
    struct eph_proto_write_file wf;
    struct eph_proto_read_file rf;
    uint16_t port;
    uint32_t streams;
    if (eph_proto_tunnel_listen_decode(data, size, &port, &streams) == 0 &&
        (port == 0 || streams == 0 || streams > 1024))
        abort();
    if (eph_proto_exec_decode(data, size, &ex) == 0) {
        if (ex.env_count > EPH_PROTO_MAX_ENV || strlen(ex.command) == 0)
            abort();
        for (uint32_t i = 0; i < ex.env_count; i++)
            if (!strchr(ex.env[i], '='))
                abort();
    }
    if (eph_proto_write_file_decode(data, size, &wf) == 0 && eph_proto_path_check(wf.path) != 0)
        abort();
    if (eph_proto_read_file_decode(data, size, &rf) == 0 && eph_proto_path_check(rf.path) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eph_proto_decoder d;
    eph_proto_decoder_init(&d, EPH_PROTO_FROM_GUEST, payload, sizeof(payload));
    /* The first byte picks the split size, so the fuzzer explores partial reads. */
    size_t split = size ? (size_t)data[0] % 37 + 1 : 1;
    size_t off = size ? 1 : 0;
    while (off < size) {
        size_t n = size - off < split ? size - off : split;
        size_t used = 0;
        struct eph_proto_frame f;
        int rc = eph_proto_decode(&d, data + off, n, &used, &f);
        if (used > n)
            abort();
        off += used;
        if (rc < 0)
            break;
        if (rc == 1)
            parse(&f);
        else if (used == 0)
            abort(); /* no progress without a frame would loop forever */
    }
    (void)eph_proto_decoder_finish(&d);
    parse_host(data, size);
    return 0;
}
