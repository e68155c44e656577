/*
 * live_output.h - a running command's output as shell.output events: coalesced, capped, UTF-8.
 *
 * The shell tool feeds each piece of a command's output as the sandbox streams it, and ticks the
 * coalescer while nothing arrives; the coalescer hands back texts to emit (docs/AGENT.md, "Live
 * output"):
 *   - at most one text per stream every EPH_LIVE_OUTPUT_INTERVAL_NS, except that a stream holding
 *     EPH_LIVE_OUTPUT_CHUNK bytes is emitted at once (a flood is a few large events, not many
 *     small ones); the first text of a stream goes out EPH_LIVE_OUTPUT_FIRST_NS after its first
 *     byte arrived, so that a command ending sooner (most of them) leaves all its output for
 *     eph_live_output_finish, which the caller records with the command's own event;
 *   - at most cap bytes of text per command, both streams together; the rest is dropped;
 *   - each text is valid UTF-8 (eph_text_utf8_sanitize: an invalid byte or a NUL is U+FFFD): a
 *     character cut by a piece's end is carried to the stream's next text, and offset is the
 *     byte offset of the text's first byte in its stream.
 * Time is passed in by the caller (now_ns, any monotonic clock), so a test drives it without
 * sleeping. Plain data (one allocation per text), no thread of its own; one thread uses it.
 */
#ifndef EPH_AGENT_LIVE_OUTPUT_H
#define EPH_AGENT_LIVE_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EPH_LIVE_OUTPUT_INTERVAL_NS (250u * 1000000u)
#define EPH_LIVE_OUTPUT_FIRST_NS (100u * 1000000u)
#define EPH_LIVE_OUTPUT_CHUNK (8u << 10)

/* One text to emit: stream 1 (stdout) or 2 (stderr), text NUL-terminated, valid UTF-8, len bytes
 * (never 0), offset in the stream. The text is valid during the call only. A non-zero return
 * stops the coalescer: it emits nothing more. */
typedef int (*eph_live_output_emit_fn)(void *arg, int stream, const char *text, size_t len,
                                       uint64_t offset);

struct eph_live_output_stream {
    unsigned char pending[EPH_LIVE_OUTPUT_CHUNK + 4]; /* raw bytes not yet emitted */
    size_t len;
    uint64_t offset;   /* of pending[0] in the stream */
    uint64_t last_ns;  /* when this stream last emitted */
    uint64_t first_ns; /* when its first byte arrived (until it has emitted) */
    bool emitted;      /* it has emitted once (last_ns is meaningful) */
};

struct eph_live_output {
    size_t cap;  /* bytes of text left to emit for this command */
    bool closed; /* the cap is reached, or emit failed: nothing more */
    eph_live_output_emit_fn emit;
    void *arg;
    struct eph_live_output_stream s[2];
};

/* cap: the most text bytes to emit (0: none at all). */
void eph_live_output_init(struct eph_live_output *lo, size_t cap, eph_live_output_emit_fn emit,
                          void *arg);
/* A piece of stream 1 or 2 (anything else is ignored), at now_ns. */
void eph_live_output_feed(struct eph_live_output *lo, int stream, const void *data, size_t len,
                          uint64_t now_ns);
/* Emits what has waited its interval. */
void eph_live_output_tick(struct eph_live_output *lo, uint64_t now_ns);
/* The command ended: emits everything still held (a character cut at the end becomes U+FFFD). */
void eph_live_output_finish(struct eph_live_output *lo);

/* A coalescer wired to one exec request (sandbox/sandbox.h), for the agent's shell tool and a
 * sandbox's commands alike: each stream's head as the sandbox keeps it, then the bytes past the
 * head that it sends live, fed as they come; ticked every tick_ms while nothing comes. */
struct eph_exec_request;
struct eph_live_exec {
    uint64_t head, seen[2]; /* bytes of each stream that come as the command writes them */
    struct eph_live_output lo;
};
/* head: the bytes of each stream the sandbox keeps at its head (the request's cap with
 * head_tail); cap: the most text to emit; emit(arg, …) as for eph_live_output_init. Sets the
 * request's on_output, on_live, on_tick, their argument, tick_ms and live_cap. */
void eph_live_exec_attach(struct eph_live_exec *le, struct eph_exec_request *req, uint64_t head,
                          size_t cap, uint32_t tick_ms, eph_live_output_emit_fn emit, void *arg);

#endif
