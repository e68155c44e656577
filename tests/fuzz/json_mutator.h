/*
 * json_mutator.h - a structure-aware mutator for the drivers whose input must first parse as JSON
 * (a create body, a connection, a configuration). Byte mutations of a JSON text mostly break its
 * syntax, so such a driver plateaus within seconds at the parser's refusals; this mutator parses
 * the input and changes one field of the object instead: a value replaced by another type or a
 * boundary value, a string's bytes mutated, a number moved to its edges, a key removed or added
 * (from the driver's own list of the names its validator knows), an array element repeated. Input
 * that does not parse is mutated as bytes, so the parser's refusals are still explored.
 *
 * A driver defines JSON_MUTATOR_KEYS (a string array literal of field names) and includes this
 * header once; libFuzzer then calls LLVMFuzzerCustomMutator instead of its own mutations.
 */
#ifndef FUZZ_JSON_MUTATOR_H
#define FUZZ_JSON_MUTATOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

static const char *const json_mutator_keys[] = JSON_MUTATOR_KEYS;

#define JSON_MUTATOR_NODES 256

struct json_mutator_rng {
    uint64_t s;
};

static unsigned json_mutator_next(struct json_mutator_rng *r, unsigned bound)
{
    /* xorshift64*: enough to spread the choices; the seed comes from libFuzzer. */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return bound ? (unsigned)((r->s * 2685821657736338717ull) >> 33) % bound : 0;
}

/* Every object and array of the document (containers only: a field is changed through its
 * parent), at most JSON_MUTATOR_NODES of them. */
static void json_mutator_collect(json_t *v, json_t **nodes, size_t *n)
{
    if (*n >= JSON_MUTATOR_NODES || !(json_is_object(v) || json_is_array(v)))
        return;
    nodes[(*n)++] = v;
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) json_mutator_collect(c, nodes, n);
    } else {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) json_mutator_collect(c, nodes, n);
    }
}

/* A value of some type, often at an edge the validators must refuse or clamp. */
static json_t *json_mutator_value(struct json_mutator_rng *r)
{
    static const char *const strings[] = {
        "",
        "a",
        "../etc/passwd",
        "/abs",
        "x\ny",
        "\xff\xfe",
        "\xc3\x28",
        "a/./b",
        "run_0000000000000000",
        "eph_",
        "http://127.0.0.1:1/",
        "https://[::1]/",
        "https://user:pw@example.com/",
        "*",
        "**/..",
        "\t",
    };
    switch (json_mutator_next(r, 12)) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(json_mutator_next(r, 2));
    case 2:
        return json_integer(0);
    case 3:
        return json_integer(-1);
    case 4:
        return json_integer(INT64_MAX);
    case 5:
        return json_integer(INT64_MIN);
    case 6:
        return json_real(1e308);
    case 7:
        return json_array();
    case 8:
        return json_object();
    case 9: {
        /* A long string: the caps on sizes. */
        size_t n = 1u << (json_mutator_next(r, 18) + 1);
        char *s = malloc(n + 1);
        if (!s)
            return json_null();
        memset(s, 'a' + (int)json_mutator_next(r, 26), n);
        s[n] = '\0';
        json_t *v = json_string(s);
        free(s);
        return v ? v : json_null();
    }
    case 10:
        return json_integer((json_int_t)json_mutator_next(r, 1u << 20));
    default: {
        const char *s = strings[json_mutator_next(r, sizeof(strings) / sizeof(strings[0]))];
        json_t *v = json_stringn_nocheck(s, strlen(s));
        return v ? v : json_null();
    }
    }
}

/* The child's new value: its own bytes or number mutated, or another value. */
static json_t *json_mutator_change(struct json_mutator_rng *r, json_t *old)
{
    if (json_is_string(old) && json_mutator_next(r, 2)) {
        size_t len = json_string_length(old), max = len * 2 + 16;
        uint8_t *b = malloc(max);
        if (!b)
            return json_null();
        memcpy(b, json_string_value(old), len);
        size_t n = LLVMFuzzerMutate(b, len, max);
        json_t *v = json_stringn_nocheck((const char *)b, n);
        free(b);
        return v ? v : json_null();
    }
    if (json_is_integer(old) && json_mutator_next(r, 2)) {
        json_int_t i = json_integer_value(old);
        switch (json_mutator_next(r, 4)) {
        case 0:
            return json_integer(i == INT64_MAX ? i : i + 1);
        case 1:
            return json_integer(i == INT64_MIN ? i : i - 1);
        case 2:
            return json_integer(i == INT64_MIN ? i : -i);
        default:
            return json_integer(i > INT64_MAX / 2 || i < INT64_MIN / 2 ? i : i * 2);
        }
    }
    return json_mutator_value(r);
}

static void json_mutator_object(struct json_mutator_rng *r, json_t *o)
{
    size_t n = json_object_size(o), pick = json_mutator_next(r, n ? (unsigned)n : 1);
    const char *key = NULL;
    const char *k;
    json_t *c;
    json_object_foreach(o, k, c)
    {
        if (pick-- == 0) {
            key = k;
            break;
        }
    }
    unsigned what = json_mutator_next(r, key ? 4 : 1);
    if (what == 0 || !key) {
        /* A key the validator knows (or a made-up one), with some value. */
        size_t nk = sizeof(json_mutator_keys) / sizeof(json_mutator_keys[0]);
        unsigned i = json_mutator_next(r, (unsigned)nk + 1);
        json_object_set_new(o, i < nk ? json_mutator_keys[i] : "unknown_field",
                            json_mutator_value(r));
    } else if (what == 1) {
        json_object_del(o, key);
    } else {
        json_object_set_new(o, key, json_mutator_change(r, json_object_get(o, key)));
    }
}

static void json_mutator_array(struct json_mutator_rng *r, json_t *a)
{
    size_t n = json_array_size(a);
    unsigned what = json_mutator_next(r, n ? 4 : 1);
    size_t i = json_mutator_next(r, n ? (unsigned)n : 1);
    if (what == 0 || !n)
        json_array_append_new(a, json_mutator_value(r));
    else if (what == 1)
        json_array_remove(a, i);
    else if (what == 2)
        json_array_append(a, json_array_get(a, i)); /* the same element again: duplicates */
    else
        json_array_set_new(a, i, json_mutator_change(r, json_array_get(a, i)));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    struct json_mutator_rng r = {.s = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1};
    json_t *doc = size ? json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL) : NULL;
    /* One mutation in eight stays a byte mutation, so the parser's own paths keep being fed. */
    if (!doc || json_mutator_next(&r, 8) == 0) {
        json_decref(doc);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    json_t *nodes[JSON_MUTATOR_NODES];
    size_t n = 0;
    json_mutator_collect(doc, nodes, &n);
    if (n == 0) {
        json_decref(doc);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    json_t *at = nodes[json_mutator_next(&r, (unsigned)n)];
    if (json_is_object(at))
        json_mutator_object(&r, at);
    else
        json_mutator_array(&r, at);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(doc);
    size_t len = text ? strlen(text) : 0;
    if (!text || len > max_size) {
        free(text);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    memcpy(data, text, len);
    free(text);
    return len;
}

#endif
