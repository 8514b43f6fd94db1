/* apps/datafile.c - reading data files for the commands. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "apps/datafile.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/h5.h"


void app_data_free(app_data *d)
{
    nf_source_free(d->src);
    memset(d, 0, sizeof *d);
}

int app_data_load(const char *path, const char *dataset, size_t expect_d, size_t expect_c, int want_ctx,
                  app_data *out)
{
    memset(out, 0, sizeof *out);
    NF_TRY(nf_source_rows_load(&out->src, path, dataset, expect_d, expect_c, want_ctx));
    nf_rows r = nf_source_rows(out->src);
    out->n = out->src->n;
    out->d = (size_t)out->src->dim;
    out->c = (size_t)out->src->ctx_dim;
    out->x = r.x;
    out->ctx = r.ctx;
    out->logp_true = r.logp_true;
    return NF_OK;
}

int app_check_output(const char *path)
{
    if (!path || !path[0]) return nf_error(NF_EINVAL, "no output file given (expected -o FILE)");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return nf_error(NF_EIO, "%s: is a directory (expected the name of the output file)", path);
    char *copy = strdup(path);
    if (!copy) return nf_error(NF_ENOMEM, "out of memory");
    const char *dir = dirname(copy);
    int ok = access(dir, W_OK | X_OK) == 0;
    int rc = ok ? NF_OK
                : nf_error(NF_EIO, "%s: cannot write here (directory '%s' does not exist or is not writable)", path,
                           dir);
    free(copy);
    return rc;
}

int app_check_new_model(const char *path, int force)
{
    NF_TRY(app_check_output(path));
    if (force || access(path, F_OK) != 0) return NF_OK;
    return nf_error(NF_EIO, "%s already exists and a new fit would replace it: give --force to replace it, another -o, "
                            "or --resume %s to continue its training", path, path);
}

/* The absolute path a file at `path` has or would have: its directory resolved (symbolic links,
 * "..", ".") and its own name appended; 0 if the directory cannot be resolved. */
static int resolved_path(const char *path, char *out, size_t size)
{
    char *d = strdup(path), *b = strdup(path);
    char dir[PATH_MAX];
    int ok = d && b && realpath(dirname(d), dir) != NULL;
    if (ok) ok = snprintf(out, size, "%s/%s", dir, basename(b)) < (int)size;
    free(d);
    free(b);
    return ok;
}

int app_same_file(const char *a, const char *b)
{
    if (!a || !b) return 0;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX + 256], rb[PATH_MAX + 256];
    return resolved_path(a, ra, sizeof ra) && resolved_path(b, rb, sizeof rb) && strcmp(ra, rb) == 0;
}

int app_check_outputs_differ(const char *a, const char *what_a, const char *b, const char *what_b)
{
    if (!a || !b || !app_same_file(a, b)) return NF_OK;
    return nf_error(NF_EINVAL, "%s: the same file as %s and %s (each output needs a file of its own)", b, what_a,
                    what_b);
}

int app_x_has_attr(const char *path, const char *attr)
{
    FILE *fp = fopen(path, "rb");
    unsigned char magic[8] = {0};
    int hdf5 = fp && fread(magic, 1, 8, fp) == 8 && !memcmp(magic, "\x89HDF\r\n\x1a\n", 8);
    if (fp) fclose(fp);
    nf_h5 *f = NULL;
    int has = hdf5 && nf_h5_open(&f, path, NULL, 0) == NF_OK;
    if (has) {
        has = nf_h5_exists(f, "/x") == 1 && nf_h5_attr_exists(f, "/x", attr) == 1;
        nf_h5_close(f);
    }
    nf_error_clear();
    return has;
}

int app_check_not_images(const char *path)
{
    int video = app_x_has_attr(path, "video_shape"), image = !video && app_x_has_attr(path, "image_shape");
    if (!video && !image) return NF_OK;
    return nf_error(NF_EINVAL, "%s holds %s (/x has %s_shape): fit them with nf %s fit, or give --dataset /x to fit "
                    "each %s as one flat vector", path, video ? "videos" : "images", video ? "video" : "image",
                    video ? "video" : "image", video ? "video" : "image");
}

int app_check_not_input(const char *out, const char *input, const char *what)
{
    if (!out || !input || !app_same_file(out, input)) return NF_OK;
    return nf_error(NF_EINVAL, "%s: the output is the same file as the %s %s (writing it would destroy the input; "
                               "choose another output file)", out, what, input);
}
