/* Images (src/image/): names, recipes made canonical and their digest, and tar layers and image
 * archives applied to a root, against hostile archives made here. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "common/id.h"
#include "image/image.h"

/* ---- names and recipes ---- */

static void test_names(void **state)
{
    (void)state;
    char n63[64], n64[65];
    memset(n63, 'a', 63);
    n63[63] = '\0';
    memset(n64, 'a', 64);
    n64[64] = '\0';
    const char *good[] = {"a", "0", "jq", "my-tools-2", "default", n63};
    const char *bad[] = {"", "-a", "A", "a_b", "a/b", "a.b", "é", " a", n64};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(eph_image_name_valid(good[i]));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(eph_image_name_valid(bad[i]));
    assert_false(eph_image_name_valid(NULL));
}

static void digest_of(const char *text, const char *base, char out[EPH_IMAGE_DIGEST_LEN + 1])
{
    json_t *r = json_loads(text, 0, NULL);
    assert_non_null(r);
    json_t *c = NULL;
    char err[256] = "";
    assert_int_equal(eph_image_recipe_canonical(r, &c, err, sizeof(err)), 0);
    assert_int_equal(eph_image_recipe_digest(c, base, out), 0);
    assert_int_equal(strlen(out), EPH_IMAGE_DIGEST_LEN);
    assert_int_equal(strncmp(out, "sha256:", 7), 0);
    json_decref(r);
    json_decref(c);
}

static void test_digest_canonical(void **state)
{
    (void)state;
    char a[80], b[80];
    /* Order, duplicates, the name, content or content_base64, and key order do not matter. */
    digest_of("{\"name\":\"x\",\"packages\":[\"jq\",\"git\",\"jq\"]}", "k", a);
    digest_of("{\"packages\":[\"git\",\"jq\"],\"name\":\"y\"}", "k", b);
    assert_string_equal(a, b);
    digest_of("{\"files\":[{\"path\":\"/etc/a\",\"content\":\"hi\"},"
              "{\"path\":\"/b\",\"content\":\"\"}]}",
              "k", a);
    digest_of("{\"files\":[{\"content_base64\":\"\",\"path\":\"/b\"},"
              "{\"path\":\"//etc/./a\",\"content_base64\":\"aGk=\",\"mode\":420}]}",
              "k", b);
    assert_string_equal(a, b);
    /* The default recipe is the empty one, with or without empty lists. */
    digest_of("{}", "k", a);
    digest_of("{\"packages\":[],\"npm\":[],\"files\":[],\"run\":[]}", "k", b);
    assert_string_equal(a, b);
    /* What changes the image changes the digest: run order, a mode, the base, a package. */
    digest_of("{\"run\":[\"a\",\"b\"]}", "k", a);
    digest_of("{\"run\":[\"b\",\"a\"]}", "k", b);
    assert_string_not_equal(a, b);
    digest_of("{\"files\":[{\"path\":\"/a\",\"content\":\"x\",\"mode\":493}]}", "k", a);
    digest_of("{\"files\":[{\"path\":\"/a\",\"content\":\"x\"}]}", "k", b);
    assert_string_not_equal(a, b);
    digest_of("{\"packages\":[\"jq\"]}", "k1", a);
    digest_of("{\"packages\":[\"jq\"]}", "k2", b);
    assert_string_not_equal(a, b);
    digest_of("{\"packages\":[\"jq\"]}", "k1", a);
    digest_of("{\"packages\":[\"jq\",\"git\"]}", "k1", b);
    assert_string_not_equal(a, b);
}

static void refused(const char *text, const char *why)
{
    json_t *r = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    assert_non_null(r);
    json_t *c = NULL;
    char err[256] = "";
    assert_int_equal(eph_image_recipe_canonical(r, &c, err, sizeof(err)), -EINVAL);
    assert_null(c);
    if (!strstr(err, why))
        fail_msg("recipe %s: error '%s' does not say '%s'", text, err, why);
    json_decref(r);
}

static void test_recipe_refusals(void **state)
{
    (void)state;
    refused("[]", "must be a JSON object");
    refused("{\"pakages\":[]}", "unknown field 'pakages'");
    refused("{\"packages\":\"jq\"}", "'packages' must be an array");
    refused("{\"packages\":[\"jq;rm -rf /\"]}", "is not a Debian package name");
    refused("{\"packages\":[\"Jq\"]}", "is not a Debian package name");
    refused("{\"packages\":[\"-o=x\"]}", "is not a Debian package name");
    refused("{\"npm\":[\"a b\"]}", "is not an npm package name");
    refused("{\"npm\":[\"$(id)\"]}", "is not an npm package name");
    refused("{\"files\":[{\"path\":\"etc/x\",\"content\":\"\"}]}", "must be an absolute path");
    refused("{\"files\":[{\"path\":\"/etc/../x\",\"content\":\"\"}]}", "'..'");
    refused("{\"files\":[{\"path\":\"/\",\"content\":\"\"}]}", "empty path");
    refused("{\"files\":[{\"path\":\"/a\"}]}", "exactly one of");
    refused("{\"files\":[{\"path\":\"/a\",\"content\":\"\",\"content_base64\":\"\"}]}",
            "exactly one of");
    refused("{\"files\":[{\"path\":\"/a\",\"content_base64\":\"!!\"}]}", "not valid base64");
    refused("{\"files\":[{\"path\":\"/a\",\"content\":\"\",\"mode\":2541}]}", "no set-id bits");
    refused("{\"files\":[{\"path\":\"/a\",\"content\":\"\",\"owner\":0}]}", "unknown field");
    refused("{\"files\":[{\"path\":\"/a\",\"content\":\"\"},{\"path\":\"/./a\",\"content\":\"\"}]}",
            "given twice");
    refused("{\"run\":[\"\"]}", "non-empty string");
    refused("{\"run\":[\"a\\u0000b\"]}", "NUL");
    /* Too large: one file over the cap. */
    size_t big = EPH_IMAGE_MAX_FILE_BYTES + 1;
    char *text = malloc(big + 64);
    assert_non_null(text);
    int n = sprintf(text, "{\"files\":[{\"path\":\"/a\",\"content\":\"");
    memset(text + n, 'x', big);
    strcpy(text + n + big, "\"}]}");
    refused(text, "files total more than");
    free(text);
}

/* ---- tar archives made here ---- */

struct tar {
    unsigned char *data;
    size_t len, cap;
};

static void tar_put(struct tar *t, const void *p, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2 + 4096;
        t->data = realloc(t->data, t->cap);
        assert_non_null(t->data);
    }
    memcpy(t->data + t->len, p, n);
    t->len += n;
}

static void tar_entry(struct tar *t, const char *name, char type, unsigned mode, const char *link,
                      const void *body, size_t size)
{
    unsigned char h[512] = {0};
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", mode);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011zo", size);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (unsigned char)type;
    if (link)
        snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    tar_put(t, h, 512);
    if (size) {
        tar_put(t, body, size);
        static const unsigned char zero[512];
        if (size % 512)
            tar_put(t, zero, 512 - size % 512);
    }
}

static void tar_file(struct tar *t, const char *name, const char *content)
{
    tar_entry(t, name, '0', 0644, NULL, content, strlen(content));
}

static void tar_end(struct tar *t)
{
    static const unsigned char zero[1024];
    tar_put(t, zero, sizeof(zero));
}

static int tar_fd(const struct tar *t)
{
    char path[] = "/tmp/test-image-tar-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(write(fd, t->data, t->len), (ssize_t)t->len);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

struct root {
    char dir[64]; /* holds root/ and outside/ */
    char root[80];
    char outside[80];
    int fd;
};

static int setup_root(void **state)
{
    struct root *r = calloc(1, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "/tmp/test-image-XXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->root, sizeof(r->root), "%s/root", r->dir);
    snprintf(r->outside, sizeof(r->outside), "%s/outside", r->dir);
    assert_int_equal(mkdir(r->root, 0755), 0);
    assert_int_equal(mkdir(r->outside, 0755), 0);
    r->fd = open(r->root, O_RDONLY | O_DIRECTORY);
    assert_true(r->fd >= 0);
    *state = r;
    return 0;
}

static int teardown_root(void **state)
{
    struct root *r = *state;
    close(r->fd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
    assert_int_equal(system(cmd), 0);
    free(r);
    return 0;
}

static int apply(struct root *r, struct tar *t, char *err, size_t errlen)
{
    tar_end(t);
    int fd = tar_fd(t);
    struct eph_image_import_stats st = {0};
    int rc = eph_image_apply_layer(r->fd, fd, UINT64_MAX, 1u << 20, &st, err, errlen);
    close(fd);
    free(t->data);
    memset(t, 0, sizeof(*t));
    return rc;
}

static bool exists_at(const char *dir, const char *rel)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void expect_refused(struct root *r, struct tar *t, const char *why)
{
    char err[512] = "";
    assert_int_not_equal(apply(r, t, err, sizeof(err)), 0);
    if (!strstr(err, why))
        fail_msg("error '%s' does not say '%s'", err, why);
}

static void test_layer_dotdot_and_absolute(void **state)
{
    struct root *r = *state;
    struct tar t = {0};
    tar_file(&t, "../outside/evil", "x");
    expect_refused(r, &t, "'..'");
    assert_false(exists_at(r->outside, "evil"));
    tar_file(&t, "a/../../outside/evil", "x");
    expect_refused(r, &t, "'..'");
    assert_false(exists_at(r->outside, "evil"));
    char abs[160];
    snprintf(abs, sizeof(abs), "%s/evil", r->outside);
    tar_file(&t, abs, "x");
    expect_refused(r, &t, "absolute");
    assert_false(exists_at(r->outside, "evil"));
    /* A hard link to a file outside, by "..". */
    tar_entry(&t, "h", '1', 0644, "../outside/x", NULL, 0);
    expect_refused(r, &t, "'..'");
}

static void test_layer_symlink_escape(void **state)
{
    struct root *r = *state;
    struct tar t = {0};
    /* A link to the outside directory, then a write through it. */
    tar_entry(&t, "esc", '2', 0777, r->outside, NULL, 0);
    tar_file(&t, "esc/pwned", "x");
    expect_refused(r, &t, "symbolic link");
    assert_false(exists_at(r->outside, "pwned"));
    /* The link itself was written, and is left as a link. */
    struct stat sb;
    char p[160];
    snprintf(p, sizeof(p), "%s/esc", r->root);
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    /* The same by a relative link, then as a directory entry, then a whiteout through it. */
    tar_entry(&t, "up", '2', 0777, "../outside", NULL, 0);
    tar_entry(&t, "up/d", '5', 0755, NULL, NULL, 0);
    expect_refused(r, &t, "symbolic link");
    assert_false(exists_at(r->outside, "d"));
    assert_int_equal(close(open(strcat(strcpy(p, r->outside), "/keep"), O_CREAT | O_WRONLY, 0644)),
                     0);
    tar_file(&t, "up/.wh.keep", "");
    expect_refused(r, &t, "symbolic link");
    assert_true(exists_at(r->outside, "keep"));
    /* A hard link to the symbolic link's target through it. */
    tar_entry(&t, "hl", '1', 0644, "up/keep", NULL, 0);
    expect_refused(r, &t, "not a file of the image");
}

static void test_layer_devices_and_setid(void **state)
{
    struct root *r = *state;
    struct tar t = {0};
    tar_entry(&t, "dev/", '5', 0755, NULL, NULL, 0);
    tar_entry(&t, "dev/sda", '4', 0666, NULL, NULL, 0);
    tar_entry(&t, "dev/mem", '3', 0666, NULL, NULL, 0);
    tar_entry(&t, "fifo", '6', 0666, NULL, NULL, 0);
    tar_entry(&t, "bin/su", '0', 04755, NULL, "#!", 2);
    tar_entry(&t, "bin/wall", '0', 02755, NULL, "#!", 2);
    tar_entry(&t, "sgid-dir", '5', 02775, NULL, NULL, 0);
    char err[256] = "";
    assert_int_equal(apply(r, &t, err, sizeof(err)), 0);
    assert_false(exists_at(r->root, "dev/sda"));
    assert_false(exists_at(r->root, "dev/mem"));
    assert_false(exists_at(r->root, "fifo"));
    struct stat sb;
    char p[160];
    snprintf(p, sizeof(p), "%s/bin/su", r->root);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0755);
    snprintf(p, sizeof(p), "%s/bin/wall", r->root);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0755);
    snprintf(p, sizeof(p), "%s/sgid-dir", r->root);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 06000, 0);
}

static void test_layer_whiteouts(void **state)
{
    struct root *r = *state;
    struct tar t = {0};
    tar_file(&t, "a/x", "1");
    tar_file(&t, "a/y", "1");
    tar_file(&t, "d/old", "1");
    tar_file(&t, "d/sub/old", "1");
    tar_file(&t, "gone/deep/f", "1");
    char err[256] = "";
    assert_int_equal(apply(r, &t, err, sizeof(err)), 0);
    /* Layer 2: a whiteout of a file and of a directory tree; an opaque directory whose own new
     * entry (written before the marker, as tar may order it) stays. */
    tar_file(&t, "a/.wh.x", "");
    tar_file(&t, ".wh.gone", "");
    tar_file(&t, "d/new", "2");
    tar_file(&t, "d/.wh..wh..opq", "");
    tar_file(&t, "d/after", "2");
    assert_int_equal(apply(r, &t, err, sizeof(err)), 0);
    assert_false(exists_at(r->root, "a/x"));
    assert_true(exists_at(r->root, "a/y"));
    assert_false(exists_at(r->root, "gone"));
    assert_false(exists_at(r->root, "d/old"));
    assert_false(exists_at(r->root, "d/sub"));
    assert_true(exists_at(r->root, "d/new"));
    assert_true(exists_at(r->root, "d/after"));
    assert_false(exists_at(r->root, "a/.wh.x"));
    assert_false(exists_at(r->root, "d/.wh..wh..opq"));
}

static void test_layer_corrupt_and_capped(void **state)
{
    struct root *r = *state;
    struct tar t = {0};
    tar_file(&t, "f", "hello");
    t.data[148] ^= 1; /* the checksum */
    expect_refused(r, &t, "not a tar archive");
    /* Cut short inside a file's content. */
    tar_entry(&t, "big", '0', 0644, NULL, "0123456789", 10);
    t.len -= 512 - 8;
    char err[256] = "";
    int fd = tar_fd(&t);
    struct eph_image_import_stats st = {0};
    assert_int_not_equal(
        eph_image_apply_layer(r->fd, fd, UINT64_MAX, 1u << 20, &st, err, sizeof(err)), 0);
    close(fd);
    free(t.data);
    memset(&t, 0, sizeof(t));
    /* Over the size cap. */
    char *blob = calloc(1, 70000);
    tar_entry(&t, "huge", '0', 0644, NULL, blob, 70000);
    free(blob);
    tar_end(&t);
    fd = tar_fd(&t);
    memset(&st, 0, sizeof(st));
    assert_int_equal(eph_image_apply_layer(r->fd, fd, UINT64_MAX, 65536, &st, err, sizeof(err)),
                     -EFBIG);
    assert_non_null(strstr(err, "larger than its limit"));
    close(fd);
    free(t.data);
    memset(&t, 0, sizeof(t));
    /* Not a tar at all. */
    tar_put(&t, "hello world", 11);
    expect_refused(r, &t, "not a tar archive");
}

static void gzip_tar(struct tar *t)
{
    uLongf cap = compressBound(t->len) + 64;
    unsigned char *out = malloc(cap);
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = t->data;
    z.avail_in = (uInt)t->len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = z.total_out;
    deflateEnd(&z);
    free(t->data);
    t->data = out;
    t->len = n;
    t->cap = cap;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_archive_docker_and_oci(void **state)
{
    struct root *r = *state;
    /* Layer 1 (gzip): a shell and a file; layer 2 (plain): a whiteout. */
    struct tar l1 = {0}, l2 = {0}, outer = {0};
    tar_entry(&l1, "bin/sh", '0', 0755, NULL, "#!", 2);
    tar_file(&l1, "etc/old", "1");
    tar_file(&l1, "etc/keep", "1");
    tar_end(&l1);
    gzip_tar(&l1);
    tar_file(&l2, "etc/.wh.old", "");
    tar_end(&l2);
    const char *man = "[{\"Config\":\"c.json\",\"Layers\":[\"one/layer.tar\",\"two/layer.tar\"]}]";
    tar_entry(&outer, "one/layer.tar", '0', 0644, NULL, l1.data, l1.len);
    tar_entry(&outer, "two/layer.tar", '0', 0644, NULL, l2.data, l2.len);
    tar_file(&outer, "manifest.json", man);
    tar_end(&outer);
    char path[128], err[512] = "", digest[80];
    snprintf(path, sizeof(path), "%s/docker.tar", r->dir);
    write_file(path, outer.data, outer.len);
    struct eph_image_import_stats st = {0};
    assert_int_equal(eph_image_import_archive(r->fd, path, 1u << 20, &st, digest, err, sizeof(err)),
                     0);
    assert_int_equal(st.layers, 2);
    assert_true(exists_at(r->root, "bin/sh"));
    assert_true(exists_at(r->root, "etc/keep"));
    assert_false(exists_at(r->root, "etc/old"));
    assert_int_equal(strncmp(digest, "sha256:", 7), 0);
    free(outer.data);
    memset(&outer, 0, sizeof(outer));
    /* An archive naming a layer that escapes. */
    tar_file(&outer, "manifest.json", "[{\"Layers\":[\"../x\"]}]");
    tar_end(&outer);
    write_file(path, outer.data, outer.len);
    assert_int_not_equal(
        eph_image_import_archive(r->fd, path, 1u << 20, &st, digest, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not a path"));
    free(outer.data);
    memset(&outer, 0, sizeof(outer));
    /* A tar that is not an image. */
    tar_file(&outer, "hello.txt", "hi");
    tar_end(&outer);
    write_file(path, outer.data, outer.len);
    assert_int_not_equal(
        eph_image_import_archive(r->fd, path, 1u << 20, &st, digest, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not an image archive"));
    free(outer.data);
    memset(&outer, 0, sizeof(outer));
    /* An OCI layout: index.json → manifest → layers by digest. */
    char d1[65], name[128], mj[512], ij[256];
    {
        eph_sha256_hex(l2.data, l2.len, d1);
        snprintf(mj, sizeof(mj),
                 "{\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
                 "\"digest\":\"sha256:%s\"}]}",
                 d1);
        char dm[65];
        eph_sha256_hex(mj, strlen(mj), dm);
        snprintf(ij, sizeof(ij), "{\"manifests\":[{\"digest\":\"sha256:%s\"}]}", dm);
        snprintf(name, sizeof(name), "blobs/sha256/%s", d1);
        tar_entry(&outer, name, '0', 0644, NULL, l2.data, l2.len);
        snprintf(name, sizeof(name), "blobs/sha256/%s", dm);
        tar_file(&outer, name, mj);
        tar_file(&outer, "index.json", ij);
        tar_file(&outer, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
        tar_end(&outer);
    }
    write_file(path, outer.data, outer.len);
    tar_file(&l1, "x", ""); /* unused; freed below */
    memset(&st, 0, sizeof(st));
    assert_int_equal(eph_image_import_archive(r->fd, path, 1u << 20, &st, digest, err, sizeof(err)),
                     0);
    assert_int_equal(st.layers, 1);
    assert_int_equal(st.whiteouts, 1);
    free(outer.data);
    free(l1.data);
    free(l2.data);
}

static void test_finish_root(void **state)
{
    struct root *r = *state;
    char err[256] = "";
    /* No /bin/sh: refused. */
    assert_int_not_equal(eph_image_finish_root(r->fd, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "/bin/sh"));
    struct tar t = {0};
    tar_entry(&t, "usr/bin/dash", '0', 0755, NULL, "#!", 2);
    tar_entry(&t, "bin", '2', 0777, "usr/bin", NULL, 0);
    tar_entry(&t, "usr/bin/sh", '2', 0777, "/usr/bin/dash", NULL, 0);
    tar_entry(&t, "usr/bin/passwd", '0', 04755, NULL, "#!", 2);
    tar_file(&t, "etc/passwd", "root:x:0:0:root:/root:/bin/sh");
    tar_entry(&t, "tmp", '2', 0777, "/etc", NULL, 0); /* a hostile /tmp */
    assert_int_equal(apply(r, &t, err, sizeof(err)), 0);
    assert_int_equal(eph_image_finish_root(r->fd, err, sizeof(err)), 0);
    char p[160], buf[256] = "";
    snprintf(p, sizeof(p), "%s/etc/passwd", r->root);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, "root:x:0:0:root:/root:/bin/sh\n"
                             "worker:x:1000:1000:worker:/home/worker:/bin/sh\n");
    struct stat sb;
    snprintf(p, sizeof(p), "%s/tmp", r->root);
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 01777);
    snprintf(p, sizeof(p), "%s/home/worker", r->root);
    assert_int_equal(lstat(p, &sb), 0);
    assert_int_equal(sb.st_uid, 1000);
    snprintf(p, sizeof(p), "%s/usr/bin/passwd", r->root);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 06000, 0);
    assert_true(exists_at(r->root, "etc/ld.so.preload"));
    assert_true(exists_at(r->root, "proc"));
    assert_true(exists_at(r->root, ".ephemeral"));
    /* Twice is the same: the worker is not added again; a set-id bit that came back is
     * cleared again (the second walk reads the whole tree). */
    snprintf(p, sizeof(p), "%s/usr/bin/passwd", r->root);
    assert_int_equal(chmod(p, 04755), 0);
    assert_int_equal(eph_image_finish_root(r->fd, err, sizeof(err)), 0);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 06000, 0);
    uint64_t bytes = 0;
    assert_int_equal(eph_image_tree_size(r->fd, &bytes), 0);
    assert_true(bytes > 0);
    snprintf(p, sizeof(p), "%s/etc/passwd", r->root);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, (off_t)strlen(buf));
}

/* A build's process gets none of the server's environment: a recipe's commands could read a
 * provider key there. It is killed past its time limit and says so. */
static void test_build_environment_and_timeout(void **state)
{
    (void)state;
    setenv("EPH_TEST_PROVIDER_KEY", "canary-of-the-server-environment", 1);
    char path[] = "/tmp/test-image-log-XXXXXX";
    int log = mkstemp(path);
    assert_true(log >= 0);
    unlink(path);
    /* A descriptor the caller left open without close-on-exec does not reach it either. */
    int held = dup2(log, 57);
    assert_int_equal(held, 57);
    char *env_argv[] = {"/bin/sh", "-c",
                        "env >&2; [ -e /proc/self/fd/57 ] && echo fd-leaked >&2; :", NULL};
    uint64_t size = 1;
    char why[256] = "";
    assert_int_equal(eph_image_run_build(env_argv, log, 30, NULL, &size, why, sizeof(why)), 0);
    char buf[8192] = "";
    ssize_t n = pread(log, buf, sizeof(buf) - 1, 0);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_null(strstr(buf, "canary-of-the-server-environment"));
    assert_null(strstr(buf, "fd-leaked"));
    close(held);
    assert_non_null(strstr(buf, "PATH=/usr/local/sbin"));
    char *sleep_argv[] = {"/bin/sleep", "30", NULL};
    assert_int_equal(eph_image_run_build(sleep_argv, log, 1, NULL, &size, why, sizeof(why)),
                     -ETIMEDOUT);
    assert_non_null(strstr(why, "images.build_timeout_seconds"));
    close(log);
    unsetenv("EPH_TEST_PROVIDER_KEY");
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skipped: the layer tests set owners (chown) and need root\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_digest_canonical),
        cmocka_unit_test(test_recipe_refusals),
        cmocka_unit_test(test_build_environment_and_timeout),
        cmocka_unit_test_setup_teardown(test_layer_dotdot_and_absolute, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_layer_symlink_escape, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_layer_devices_and_setid, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_layer_whiteouts, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_layer_corrupt_and_capped, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_archive_docker_and_oci, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_finish_root, setup_root, teardown_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
