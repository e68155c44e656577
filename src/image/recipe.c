/*
 * recipe.c - image names, recipes made canonical, and the digest that names a build. See image.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/cleanup.h"
#include "common/id.h"
#include "image/image.h"

bool eph_image_name_valid(const char *name)
{
    if (!name || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return false;
    size_t n = 0;
    for (const char *p = name; *p; p++, n++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || (*p == '-' && n > 0);
        if (!ok || n >= 63)
            return false;
    }
    return true;
}

#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

/* Debian's rule for a package name: [a-z0-9][a-z0-9+.-]+ (one character is allowed here too). */
static bool debian_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 128 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* An npm package spec: a name, maybe scoped, maybe with @version; nothing a shell would read. */
static bool npm_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 214 || s[0] == '-' || s[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("@/._~^-", c)))
            return false;
    }
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A list of names, checked, sorted and without duplicates, as a new JSON array in *out. */
static int name_list(const json_t *in, const char *field, bool (*ok)(const char *, size_t),
                     const char *what, json_t **out, char *err, size_t errlen)
{
    *out = json_array();
    if (!*out)
        return -ENOMEM;
    if (!in)
        return 0;
    if (!json_is_array(in))
        return BAD("'%s' must be an array of strings", field);
    size_t n = json_array_size(in);
    if (n > EPH_IMAGE_MAX_PACKAGES)
        return BAD("'%s' has %zu entries, more than %d", field, n, EPH_IMAGE_MAX_PACKAGES);
    EPH_AUTOFREE const char **names = calloc(n + 1, sizeof(char *));
    if (!names)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(in, i);
        if (!json_is_string(v))
            return BAD("%s[%zu] must be a string", field, i);
        const char *s = json_string_value(v);
        if (strlen(s) != json_string_length(v) || !ok(s, json_string_length(v)))
            return BAD("%s[%zu] '%.64s' is not %s", field, i, s, what);
        names[i] = s;
    }
    qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++)
        if ((i == 0 || strcmp(names[i], names[i - 1])) &&
            json_array_append_new(*out, json_string(names[i])))
            return -ENOMEM;
    return 0;
}

static char *b64_encode(const unsigned char *data, size_t n)
{
    size_t len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len);
    if (out)
        sodium_bin2base64(out, len, data, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

static int cmp_file(const void *a, const void *b)
{
    const char *pa = json_string_value(json_object_get(*(json_t *const *)a, "path"));
    const char *pb = json_string_value(json_object_get(*(json_t *const *)b, "path"));
    return strcmp(pa, pb);
}

/* One file: {"path": "/abs", "content_base64": "...", "mode": N}. */
static int one_file(const json_t *f, size_t i, size_t *total, json_t **out, char *err,
                    size_t errlen)
{
    if (!json_is_object(f))
        return BAD("files[%zu] must be an object with 'path' and 'content'", i);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)f, key, v)
    {
        if (strcmp(key, "path") && strcmp(key, "content") && strcmp(key, "content_base64") &&
            strcmp(key, "mode"))
            return BAD("files[%zu]: unknown field '%.32s'", i, key);
    }
    json_t *path = json_object_get(f, "path");
    if (!json_is_string(path))
        return BAD("files[%zu] needs a 'path' string", i);
    const char *p = json_string_value(path);
    if (strlen(p) != json_string_length(path) || p[0] != '/')
        return BAD("files[%zu].path '%.64s' must be an absolute path", i, p);
    char clean[1024], why[128];
    if (eph_image_path_clean(p, true, clean, sizeof(clean), why, sizeof(why)))
        return BAD("files[%zu].path '%.64s': %s", i, p, why);
    json_t *content = json_object_get(f, "content");
    json_t *b64 = json_object_get(f, "content_base64");
    if ((content != NULL) == (b64 != NULL) || (content && !json_is_string(content)) ||
        (b64 && !json_is_string(b64)))
        return BAD("files[%zu] needs exactly one of 'content' (string) or 'content_base64'", i);
    json_int_t mode = 0644;
    json_t *m = json_object_get(f, "mode");
    if (m) {
        if (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 0777)
            return BAD("files[%zu].mode must be a number from 0 to 0777 (511): no set-id bits", i);
        mode = json_integer_value(m);
    }
    EPH_AUTOFREE char *encoded = NULL;
    size_t size;
    if (content) {
        size = json_string_length(content);
        encoded = b64_encode((const unsigned char *)json_string_value(content), size);
    } else {
        const char *s = json_string_value(b64);
        size_t slen = json_string_length(b64);
        size_t cap = slen / 4 * 3 + 3;
        EPH_AUTOFREE unsigned char *bin = malloc(cap);
        if (!bin ||
            sodium_base642bin(bin, cap, s, slen, NULL, &size, NULL, sodium_base64_VARIANT_ORIGINAL))
            return BAD("files[%zu].content_base64 is not valid base64", i);
        /* Re-encoded, so that one content has one spelling. */
        encoded = b64_encode(bin, size);
    }
    if (!encoded)
        return -ENOMEM;
    *total += size;
    if (*total > EPH_IMAGE_MAX_FILE_BYTES)
        return BAD("files total more than %u bytes", EPH_IMAGE_MAX_FILE_BYTES);
    char abs[1026];
    snprintf(abs, sizeof(abs), "/%s", clean);
    *out = json_pack("{s:s, s:s, s:I}", "path", abs, "content_base64", encoded, "mode", mode);
    return *out ? 0 : -ENOMEM;
}

static int files_list(const json_t *in, json_t **out, char *err, size_t errlen)
{
    *out = json_array();
    if (!*out)
        return -ENOMEM;
    if (!in)
        return 0;
    if (!json_is_array(in))
        return BAD("'files' must be an array");
    size_t n = json_array_size(in), total = 0;
    if (n > EPH_IMAGE_MAX_FILES)
        return BAD("'files' has %zu entries, more than %d", n, EPH_IMAGE_MAX_FILES);
    EPH_AUTOFREE json_t **items = calloc(n + 1, sizeof(json_t *));
    if (!items)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = one_file(json_array_get(in, i), i, &total, &items[i], err, errlen);
    if (!rc) {
        qsort(items, n, sizeof(json_t *), cmp_file);
        for (size_t i = 1; !rc && i < n; i++)
            if (!cmp_file(&items[i - 1], &items[i]))
                rc = BAD("files: '%.64s' is given twice",
                         json_string_value(json_object_get(items[i], "path")));
    }
    for (size_t i = 0; i < n; i++) {
        if (!rc && json_array_append(*out, items[i]))
            rc = -ENOMEM;
        json_decref(items[i]);
    }
    return rc;
}

static int run_list(const json_t *in, json_t **out, char *err, size_t errlen)
{
    *out = json_array();
    if (!*out)
        return -ENOMEM;
    if (!in)
        return 0;
    if (!json_is_array(in))
        return BAD("'run' must be an array of shell commands");
    size_t n = json_array_size(in);
    if (n > EPH_IMAGE_MAX_RUN)
        return BAD("'run' has %zu commands, more than %d", n, EPH_IMAGE_MAX_RUN);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(in, i);
        if (!json_is_string(v) || !json_string_length(v))
            return BAD("run[%zu] must be a non-empty string", i);
        if (strlen(json_string_value(v)) != json_string_length(v))
            return BAD("run[%zu] holds a NUL character", i);
        if (json_string_length(v) > EPH_IMAGE_MAX_RUN_BYTES)
            return BAD("run[%zu] is longer than %d bytes", i, EPH_IMAGE_MAX_RUN_BYTES);
        if (json_array_append(*out, v))
            return -ENOMEM;
    }
    return 0;
}

int eph_image_recipe_canonical(const json_t *recipe, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!json_is_object(recipe))
        return BAD("an image recipe must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)recipe, key, v)
    {
        if (strcmp(key, "name") && strcmp(key, "packages") && strcmp(key, "npm") &&
            strcmp(key, "files") && strcmp(key, "run"))
            return BAD("unknown field '%.32s' in an image recipe", key);
    }
    EPH_AUTOJSON json_t *packages = NULL;
    EPH_AUTOJSON json_t *npm = NULL;
    EPH_AUTOJSON json_t *files = NULL;
    EPH_AUTOJSON json_t *run = NULL;
    int rc = name_list(json_object_get(recipe, "packages"), "packages", debian_name_ok,
                       "a Debian package name", &packages, err, errlen);
    if (!rc)
        rc = name_list(json_object_get(recipe, "npm"), "npm", npm_name_ok, "an npm package name",
                       &npm, err, errlen);
    if (!rc)
        rc = files_list(json_object_get(recipe, "files"), &files, err, errlen);
    if (!rc)
        rc = run_list(json_object_get(recipe, "run"), &run, err, errlen);
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (rc)
        return rc;
    *out = json_pack("{s:O, s:O, s:O, s:O}", "files", files, "npm", npm, "packages", packages,
                     "run", run);
    return *out ? 0 : -ENOMEM;
}

int eph_image_recipe_digest(const json_t *canonical, const char *base_key,
                            char out[EPH_IMAGE_DIGEST_LEN + 1])
{
    /* Sorted keys, no spaces, UTF-8 as is: one recipe has one text. */
    EPH_AUTOFREE char *text =
        json_dumps(canonical, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (!text)
        return -ENOMEM;
    EPH_AUTOFREE char *all = NULL;
    if (asprintf(&all, "ephemeral image recipe 1\nbase %s\n%s", base_key ? base_key : "", text) < 0)
        return -ENOMEM;
    char hex[65];
    eph_sha256_hex(all, strlen(all), hex);
    snprintf(out, EPH_IMAGE_DIGEST_LEN + 1, "sha256:%s", hex);
    return 0;
}
