/*
 * protocol.h - the framed, versioned protocol between the worker (host side) and ephemeral-init
 * (the sandbox's PID 1). Compiled into both the daemon and the static init: pure C, libc only, no
 * allocation.
 *
 * A frame is a 16-byte header followed by a payload (docs/PROTOCOL.md has the table):
 *
 *   off size field
 *     0    2 magic      'E' 'G'
 *     2    1 version    EPH_PROTO_VERSION
 *     3    1 type       enum eph_proto_type
 *     4    2 flags      per type; unknown bits must be zero
 *     6    2 reserved   must be zero
 *     8    4 id         request id; a reply carries the id of its request
 *    12    4 length     payload bytes, at most the type's cap (never above EPH_PROTO_MAX_PAYLOAD)
 *
 * Integers are little-endian on the wire. Strings inside payloads are a u32 length followed by
 * that many bytes, the last of which is a NUL and no other is (so a parsed string can be used in
 * place as a C string).
 *
 * Everything that arrives is hostile: the decoder rejects bad magic or version, unknown types,
 * types that may not travel in that direction, non-zero reserved bits, lengths above the cap of
 * their type, and a stream that ends mid-frame. Payload parsers check every length against the
 * bytes present. Errors are -EPROTO (malformed) or -EMSGSIZE (over a cap).
 */
#ifndef EPH_GUEST_PROTOCOL_H
#define EPH_GUEST_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EPH_PROTO_MAGIC0 'E'
#define EPH_PROTO_MAGIC1 'G'
#define EPH_PROTO_VERSION 1
#define EPH_PROTO_HEADER_SIZE 16
/* The hard cap on any payload; types have smaller caps where they can. */
#define EPH_PROTO_MAX_PAYLOAD (1024u * 1024u)
/* Output and file data travel in chunks of at most this many bytes. */
#define EPH_PROTO_CHUNK 65536u
/* Caps inside payloads. */
#define EPH_PROTO_MAX_ENV 256
#define EPH_PROTO_MAX_PATH 4096
#define EPH_PROTO_MAX_ERROR_MSG 1024
#define EPH_PROTO_MAX_PING 64
/* A microVM parked for a snapshot (the microvm backend; docs/SANDBOX.md, "MicroVM snapshots"):
 * before any frame, the guest says the first line and the host's first line to a restored guest
 * starts with the word (both lines end with a newline; the resume line is at most the size). */
#define EPH_PROTO_VM_PARKED "ephemeral-parked\n"
#define EPH_PROTO_VM_RESUME_WORD "ephemeral.resume=1"
#define EPH_PROTO_VM_RESUME_MAX 1024u
/* The largest file data one write_file frame carries (callers split bigger files). */
#define EPH_PROTO_MAX_WRITE_DATA (EPH_PROTO_MAX_PAYLOAD - 12 - EPH_PROTO_MAX_PATH)

enum eph_proto_type {
    EPH_PROTO_HELLO = 0x01,       /* guest -> host, id 0, once at start: u32 version, u32 pid */
    EPH_PROTO_PING = 0x02,        /* host -> guest: up to 64 opaque bytes */
    EPH_PROTO_PONG = 0x03,        /* guest -> host: the ping's bytes */
    EPH_PROTO_OK = 0x04,          /* guest -> host: empty; write_file and shutdown succeeded */
    EPH_PROTO_ERROR = 0x05,       /* guest -> host: i32 errno (positive), string message */
    EPH_PROTO_EXEC = 0x10,        /* host -> guest: struct eph_proto_exec */
    EPH_PROTO_EXEC_STDOUT = 0x11, /* guest -> host: raw bytes, at most EPH_PROTO_CHUNK */
    EPH_PROTO_EXEC_STDERR = 0x12, /* guest -> host: raw bytes, at most EPH_PROTO_CHUNK */
    EPH_PROTO_EXEC_EXIT = 0x13,   /* guest -> host: struct eph_proto_exit (36 bytes) */
    /* guest -> host: raw bytes of a stream past its head, as the command writes them, at most
     * EPH_PROTO_CHUNK each and the exec's live_cap in all (both streams): what a running command
     * shows live. The same bytes are still kept for the tail as before. */
    EPH_PROTO_EXEC_LIVE_STDOUT = 0x14,
    EPH_PROTO_EXEC_LIVE_STDERR = 0x15,
    EPH_PROTO_WRITE_FILE = 0x20, /* host -> guest: struct eph_proto_write_file */
    EPH_PROTO_READ_FILE = 0x21,  /* host -> guest: u64 cap, string path */
    EPH_PROTO_FILE_DATA = 0x22,  /* guest -> host: raw bytes, at most EPH_PROTO_CHUNK */
    EPH_PROTO_FILE_END = 0x23,   /* guest -> host: u64 size: the file was sent whole */
    /* host -> guest: u32 max entries, u32 max depth: list the scratch directory, never following a
     * symlink. The guest answers file_entry frames (at most max entries), then list_end. */
    EPH_PROTO_LIST_FILES = 0x24,
    EPH_PROTO_FILE_ENTRY = 0x25, /* guest -> host: struct eph_proto_file_entry */
    EPH_PROTO_LIST_END = 0x26,   /* guest -> host: u32 flags (EPH_PROTO_LIST_*), u32 entries sent */
    EPH_PROTO_SHUTDOWN = 0x30,   /* host -> guest: empty; the guest kills everything, says OK */
    /* The broker tunnel (docs/BROKER.md). The id of a tunnel frame is its stream's id, chosen by
     * the guest (odd) when it accepts a connection; tunnel frames interleave with the replies of
     * the request in flight. 0x45-0x4f stay reserved. */
    EPH_PROTO_TUNNEL_LISTEN = 0x40, /* host -> guest: u32 port, u32 max streams; ok or error */
    EPH_PROTO_TUNNEL_OPEN = 0x41,   /* guest -> host: empty; a new stream */
    EPH_PROTO_TUNNEL_DATA = 0x42,   /* both: raw bytes of the stream, at most EPH_PROTO_CHUNK */
    EPH_PROTO_TUNNEL_WINDOW = 0x43, /* both: u32 more bytes the peer may send on the stream */
    EPH_PROTO_TUNNEL_CLOSE = 0x44,  /* both: u32 EPH_PROTO_CLOSE_* */
};

/* Which side may send a type (a bit mask: tunnel data travels both ways); the decoder of each
 * side rejects what only the other may send. */
enum eph_proto_dir { EPH_PROTO_FROM_HOST = 1, EPH_PROTO_FROM_GUEST = 2 };
#define EPH_PROTO_FROM_BOTH 3

/* Flags. */
#define EPH_PROTO_EXIT_TIMED_OUT 0x1u
#define EPH_PROTO_EXIT_STDOUT_TRUNCATED 0x2u
#define EPH_PROTO_EXIT_STDERR_TRUNCATED 0x4u
#define EPH_PROTO_WRITE_APPEND 0x1u   /* append instead of create-or-truncate */
#define EPH_PROTO_LIST_TRUNCATED 0x1u /* list_end: more entries (or deeper ones) were left out */
#define EPH_PROTO_CLOSE_WRITE 1u      /* tunnel_close: no more data from me (half close) */
#define EPH_PROTO_CLOSE_RESET 2u      /* tunnel_close: the stream is over, both ways */
/* Each side of a stream may send this many bytes before the peer grants more (tunnel_window);
 * a grant never takes the credit above it either. */
#define EPH_PROTO_TUNNEL_WINDOW_SIZE (256u * 1024u)

struct eph_proto_header {
    uint8_t type;
    uint16_t flags;
    uint32_t id;
    uint32_t length;
};

/* A decoded frame. payload points into the decoder's buffer and is valid until the next call. */
struct eph_proto_frame {
    struct eph_proto_header hdr;
    const uint8_t *payload;
};

/* The incremental decoder: feed it whatever bytes arrived, in any split, and take frames out.
 * It never allocates: buf (cap bytes, at least the largest payload accepted) belongs to the caller
 * and outlives the decoder. */
struct eph_proto_decoder {
    enum eph_proto_dir from; /* the direction of the frames this decoder accepts */
    uint8_t hdr[EPH_PROTO_HEADER_SIZE];
    size_t hdr_have;
    struct eph_proto_header cur;
    uint8_t *buf;
    size_t cap;
    size_t have;
    int error; /* sticky: once a stream is broken it stays broken */
};

void eph_proto_decoder_init(struct eph_proto_decoder *d, enum eph_proto_dir from, uint8_t *buf,
                            size_t cap);
/* Forgets any partial frame and the sticky error (for a side that resynchronises after garbage). */
void eph_proto_decoder_reset(struct eph_proto_decoder *d);
/* Consumes bytes from data[0..n) and stops after the first complete frame. Returns 1 with *frame
 * filled (valid until the next call), 0 when all n bytes were consumed without completing a
 * frame, or a negative error (sticky). *used is set to the bytes consumed in every case. */
int eph_proto_decode(struct eph_proto_decoder *d, const void *data, size_t n, size_t *used,
                     struct eph_proto_frame *frame) __attribute__((warn_unused_result));
/* At end of stream: 0 when no frame was cut short, else -EPROTO. */
int eph_proto_decoder_finish(const struct eph_proto_decoder *d);

/* The largest payload a type may carry, or 0 when the type is unknown. */
uint32_t eph_proto_type_cap(uint8_t type);
/* The direction a type travels in, or 0 when unknown. */
int eph_proto_type_dir(uint8_t type);
const char *eph_proto_type_name(uint8_t type);
/* Checks a header against the rules above (magic, version, type, direction, flags, length). */
int eph_proto_header_parse(const uint8_t raw[EPH_PROTO_HEADER_SIZE], enum eph_proto_dir from,
                           struct eph_proto_header *out) __attribute__((warn_unused_result));
void eph_proto_header_encode(uint8_t out[EPH_PROTO_HEADER_SIZE], uint8_t type, uint16_t flags,
                             uint32_t id, uint32_t length);

/* A bounded writer for building a whole frame (header + payload) into a caller's buffer. The
 * first error sticks and every later put is a no-op, so callers check once at the end. */
struct eph_proto_writer {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int error;
};

void eph_proto_writer_init(struct eph_proto_writer *w, uint8_t *buf, size_t cap);
void eph_proto_put_u32(struct eph_proto_writer *w, uint32_t v);
void eph_proto_put_u64(struct eph_proto_writer *w, uint64_t v);
void eph_proto_put_bytes(struct eph_proto_writer *w, const void *p, size_t n);
/* A string field: s must not contain NUL (it cannot); max bounds strlen(s). */
void eph_proto_put_string(struct eph_proto_writer *w, const char *s, size_t max);
/* Writes the header over the first 16 bytes of the writer (payload = everything after them) and
 * returns the frame's total length, or a negative error. */
int eph_proto_writer_finish(struct eph_proto_writer *w, uint8_t type, uint16_t flags, uint32_t id)
    __attribute__((warn_unused_result));

/* A bounded reader over one payload. */
struct eph_proto_reader {
    const uint8_t *p;
    size_t len;
    size_t off;
    int error;
};

void eph_proto_reader_init(struct eph_proto_reader *r, const uint8_t *p, size_t len);
uint32_t eph_proto_get_u32(struct eph_proto_reader *r);
uint64_t eph_proto_get_u64(struct eph_proto_reader *r);
/* A string field of at most max bytes (excluding the NUL); returns it in place, or NULL. */
const char *eph_proto_get_string(struct eph_proto_reader *r, size_t max);
/* 0 when everything parsed and every byte was used, else -EPROTO. */
int eph_proto_reader_done(const struct eph_proto_reader *r);

/* ---- Typed payloads ---------------------------------------------------------------------- */

/* ORed into a stream's cap in an exec request: when the stream is longer than the cap, the guest
 * sends its first cap - cap/2 bytes as they come and its last cap/2 bytes after the command ended
 * (never more than cap in all), so that the tail, where errors are, is not lost. A cap never
 * reaches this bit otherwise. */
#define EPH_PROTO_CAP_HEAD_TAIL 0x80000000u

struct eph_proto_exec {
    uint32_t timeout_ms;
    uint32_t stdout_cap;
    uint32_t stderr_cap;
    const char *command;                /* /bin/sh -c command */
    const char *cwd;                    /* "" = the scratch directory */
    uint32_t env_count;                 /* at most EPH_PROTO_MAX_ENV */
    const char *env[EPH_PROTO_MAX_ENV]; /* "K=V", K non-empty */
    uint32_t live_cap; /* bytes past the heads to send as they come (exec_live_*); 0: none. An
                          optional last u32 of the payload: absent is 0 */
};

/* Builds a whole exec frame into buf; returns its length or a negative error (-EMSGSIZE when it
 * does not fit the caps). env may be NULL; it is NULL-terminated. */
int eph_proto_exec_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t timeout_ms,
                          uint32_t stdout_cap, uint32_t stderr_cap, const char *command,
                          const char *cwd, const char *const *env, uint32_t live_cap)
    __attribute__((warn_unused_result));
/* Parses an exec payload; strings point into payload. */
int eph_proto_exec_decode(const uint8_t *payload, size_t len, struct eph_proto_exec *out)
    __attribute__((warn_unused_result));

struct eph_proto_exit {
    int32_t exit_code;
    uint32_t signal;
    uint32_t flags; /* EPH_PROTO_EXIT_* */
    uint64_t duration_us;
    uint64_t stdout_total;
    uint64_t stderr_total;
};

#define EPH_PROTO_EXIT_SIZE 36
int eph_proto_exit_encode(uint8_t *buf, size_t cap, uint32_t id, const struct eph_proto_exit *e)
    __attribute__((warn_unused_result));
int eph_proto_exit_decode(const uint8_t *payload, size_t len, struct eph_proto_exit *out)
    __attribute__((warn_unused_result));

struct eph_proto_write_file {
    uint32_t mode;  /* permission bits, masked to 0777 by the guest */
    uint32_t flags; /* EPH_PROTO_WRITE_* */
    const char *path;
    const uint8_t *data;
    size_t len;
};

int eph_proto_write_file_encode(uint8_t *buf, size_t cap, uint32_t id, const char *path,
                                uint32_t mode, uint32_t flags, const void *data, size_t len)
    __attribute__((warn_unused_result));
int eph_proto_write_file_decode(const uint8_t *payload, size_t len,
                                struct eph_proto_write_file *out)
    __attribute__((warn_unused_result));

struct eph_proto_read_file {
    uint64_t cap;
    const char *path;
};

int eph_proto_read_file_encode(uint8_t *buf, size_t cap, uint32_t id, const char *path,
                               uint64_t max) __attribute__((warn_unused_result));
int eph_proto_read_file_decode(const uint8_t *payload, size_t len, struct eph_proto_read_file *out)
    __attribute__((warn_unused_result));

/* list_files: the walk's bounds. A request above them is malformed. */
#define EPH_PROTO_MAX_LIST_ENTRIES 100000u
#define EPH_PROTO_MAX_LIST_DEPTH 64u

enum eph_proto_file_kind {
    EPH_PROTO_KIND_FILE = 1,
    EPH_PROTO_KIND_DIR = 2,
    EPH_PROTO_KIND_SYMLINK = 3,
};

/* One entry of a listing: u32 kind, u64 size, string path (relative to the scratch directory),
 * string target (a symlink's, else empty). */
struct eph_proto_file_entry {
    uint32_t kind; /* enum eph_proto_file_kind */
    uint64_t size; /* a file's bytes; 0 for a directory; a symlink's target length */
    const char *path;
    const char *target;
};

int eph_proto_list_files_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t max_entries,
                                uint32_t max_depth) __attribute__((warn_unused_result));
int eph_proto_list_files_decode(const uint8_t *payload, size_t len, uint32_t *max_entries,
                                uint32_t *max_depth) __attribute__((warn_unused_result));
int eph_proto_file_entry_encode(uint8_t *buf, size_t cap, uint32_t id,
                                const struct eph_proto_file_entry *e)
    __attribute__((warn_unused_result));
/* Checks everything: the kind, the path (eph_proto_rel_path_check), a target only on a symlink,
 * valid UTF-8 throughout. */
int eph_proto_file_entry_decode(const uint8_t *payload, size_t len,
                                struct eph_proto_file_entry *out)
    __attribute__((warn_unused_result));
int eph_proto_list_end_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t flags, uint32_t count)
    __attribute__((warn_unused_result));
int eph_proto_list_end_decode(const uint8_t *payload, size_t len, uint32_t *flags, uint32_t *count)
    __attribute__((warn_unused_result));

/* error: the errno travels positive on the wire and comes back as a negative errno. */
int eph_proto_error_encode(uint8_t *buf, size_t cap, uint32_t id, int err, const char *msg)
    __attribute__((warn_unused_result));
int eph_proto_error_decode(const uint8_t *payload, size_t len, int *err, const char **msg)
    __attribute__((warn_unused_result));

/* hello */
int eph_proto_hello_encode(uint8_t *buf, size_t cap, uint32_t pid)
    __attribute__((warn_unused_result));
int eph_proto_hello_decode(const uint8_t *payload, size_t len, uint32_t *version, uint32_t *pid)
    __attribute__((warn_unused_result));

/* A frame with a raw payload (ping, pong, chunks, file data, ok, shutdown, file end...). */
int eph_proto_raw_encode(uint8_t *buf, size_t cap, uint8_t type, uint16_t flags, uint32_t id,
                         const void *payload, size_t len) __attribute__((warn_unused_result));

/* Tunnel frames. A window grant is 1..EPH_PROTO_TUNNEL_WINDOW_SIZE, a close one of
 * EPH_PROTO_CLOSE_*, a listen's port 1..65535 and its stream count 1..1024. */
int eph_proto_tunnel_listen_encode(uint8_t *buf, size_t cap, uint32_t id, uint16_t port,
                                   uint32_t max_streams) __attribute__((warn_unused_result));
int eph_proto_tunnel_listen_decode(const uint8_t *payload, size_t len, uint16_t *port,
                                   uint32_t *max_streams) __attribute__((warn_unused_result));
int eph_proto_tunnel_u32_encode(uint8_t *buf, size_t cap, uint8_t type, uint32_t stream,
                                uint32_t value) __attribute__((warn_unused_result));
/* A window or close payload: checks the value's range for the type. */
int eph_proto_tunnel_u32_decode(uint8_t type, const uint8_t *payload, size_t len, uint32_t *value)
    __attribute__((warn_unused_result));

/* Validates a path for write_file/read_file: non-empty, at most EPH_PROTO_MAX_PATH bytes, no
 * "..", no empty components except a leading "/" (absolute = inside the sandbox). */
int eph_proto_path_check(const char *path) __attribute__((warn_unused_result));
/* A path a listing may name: eph_proto_path_check's rules, relative (no leading "/"), valid UTF-8
 * and no control characters (it is shown to people and put in JSON). */
int eph_proto_rel_path_check(const char *path) __attribute__((warn_unused_result));
/* n bytes of s are well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
bool eph_proto_utf8_valid(const char *s, size_t n);

#endif
