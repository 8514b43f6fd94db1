/* datasets/images.c - image data files: the attributes of /x, the labels three ways (/labels,
 * /class_names, the one-hot /context), the check of grey levels, and loading a whole image file. */
#include "datasets/images.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nf_image_set_free(nf_image_set *s)
{
    if (!s) return;
    free(s->x);
    free(s->labels);
    if (s->class_names) nf_h5_strings_free(s->class_names, (size_t)s->info.n_classes);
    memset(s, 0, sizeof *s);
}

size_t nf_image_info_dim(const nf_image_info *info)
{
    return (size_t)info->h * (size_t)info->w * (size_t)info->c;
}

int nf_image_check_values(const char *what, const nf_image_info *info, const double *x, size_t n)
{
    size_t d = nf_image_info_dim(info);
    double top = info->levels - 1;
    for (size_t r = 0; r < n; r++)
        for (size_t e = 0; e < d; e++) {
            double v = x[r * d + e];
            if (v >= 0 && v <= top && v == floor(v)) continue;
            size_t k = e % (size_t)info->c, pix = e / (size_t)info->c;
            return nf_error(NF_EDATA, "%s: image %zu, pixel (%zu, %zu) channel %zu is %g (expected an integer grey "
                            "level 0..%d)", what, r, pix / (size_t)info->w, pix % (size_t)info->w, k, v,
                            info->levels - 1);
        }
    return NF_OK;
}

int nf_image_attrs_write(nf_h5 *f, const nf_image_info *info)
{
    int64_t shape[3] = {info->h, info->w, info->c};
    NF_TRY(nf_h5_attr_set_int64s(f, "/x", "image_shape", shape, 3));
    return nf_h5_attr_set_int64(f, "/x", "levels", info->levels);
}

int nf_image_labels_write(nf_h5 *f, const int64_t *labels, size_t n, char *const *class_names, int n_classes)
{
    const size_t K = (size_t)n_classes;
    NF_TRY(nf_h5_write_int64(f, "/labels", labels, n, 0));
    NF_TRY(nf_h5_write_strings(f, "/class_names", (const char *const *)class_names, K));
    double *ctx = calloc(n * K, sizeof *ctx);
    char **names = calloc(K, sizeof *names);
    int rc = ctx && names ? NF_OK : nf_error(NF_ENOMEM, "out of memory for the context of %zu items", n);
    for (size_t k = 0; rc == NF_OK && k < K; k++) {
        size_t len = strlen(class_names[k]) + 7;
        if (!(names[k] = malloc(len))) rc = nf_error(NF_ENOMEM, "out of memory for the class names");
        else snprintf(names[k], len, "class=%s", class_names[k]);
    }
    for (size_t i = 0; rc == NF_OK && i < n; i++) ctx[i * K + (size_t)labels[i]] = 1;
    if (rc == NF_OK) rc = nf_h5_write_double(f, "/context", ctx, n, K);
    if (rc == NF_OK) rc = nf_h5_write_strings(f, "/context_names", (const char *const *)names, K);
    for (size_t k = 0; names && k < K; k++) free(names[k]);
    free(names);
    free(ctx);
    return rc;
}

int nf_image_set_write(nf_h5 *f, const nf_image_set *s)
{
    NF_TRY(nf_h5_write_double(f, "/x", s->x, s->n, nf_image_info_dim(&s->info)));
    NF_TRY(nf_image_attrs_write(f, &s->info));
    if (s->labels && s->info.n_classes > 0)
        NF_TRY(nf_image_labels_write(f, s->labels, s->n, s->class_names, s->info.n_classes));
    return NF_OK;
}

int nf_image_labels_read(nf_h5 *f, size_t n, int64_t **labels, char ***names, size_t *K)
{
    const char *path = nf_h5_path(f);
    *labels = NULL, *names = NULL, *K = 0;
    int have_l = nf_h5_exists(f, "/labels"), have_n = nf_h5_exists(f, "/class_names");
    if (!have_l && !have_n) return NF_OK;
    if (!have_l || !have_n)
        return nf_error(NF_EFORMAT, "%s: %s without %s (expected both, or neither for images without classes)",
                        path, have_l ? "/labels" : "/class_names", have_l ? "/class_names" : "/labels");
    size_t rows, cols, k;
    NF_TRY(nf_h5_read_strings(f, "/class_names", names, &k));
    int rc = NF_OK;
    if (k == 0 || k > NF_IMAGE_MAX_CLASSES)
        rc = nf_error(NF_EFORMAT, "%s:/class_names holds %zu names (expected 1..%d)", path, k, NF_IMAGE_MAX_CLASSES);
    if (rc == NF_OK) rc = nf_h5_read_int64(f, "/labels", labels, &rows, &cols);
    if (rc == NF_OK && (rows != n || cols != 1))
        rc = nf_error(NF_EFORMAT, "%s:/labels has %zu x %zu entries (expected %zu, one per image)", path, rows, cols, n);
    for (size_t i = 0; rc == NF_OK && i < n; i++)
        if ((*labels)[i] < 0 || (*labels)[i] >= (int64_t)k)
            rc = nf_error(NF_EFORMAT, "%s:/labels: image %zu has label %lld (expected 0..%zu, one of /class_names)",
                          path, i, (long long)(*labels)[i], k - 1);
    if (rc != NF_OK) {
        free(*labels);
        if (*names) nf_h5_strings_free(*names, k);
        *labels = NULL, *names = NULL;
        return rc;
    }
    *K = k;
    return NF_OK;
}

int nf_image_info_read(nf_h5 *f, size_t n, size_t d, nf_image_info *info)
{
    const char *path = nf_h5_path(f);
    memset(info, 0, sizeof *info);
    if (!nf_h5_attr_exists(f, "/x", "image_shape") && nf_h5_attr_exists(f, "/x", "video_shape"))
        return nf_error(NF_EFORMAT, "%s holds videos (/x has video_shape), not images: nf video fit / eval / sample "
                        "read it", path);
    if (!nf_h5_attr_exists(f, "/x", "image_shape"))
        return nf_error(NF_EFORMAT, "%s:/x has no attribute image_shape (expected an image data file: nf data make "
                        "shapes|digits, nf data import of PNG files or an image NPY)", path);
    int64_t shape[3], levels = 256;
    NF_TRY(nf_h5_attr_get_int64s(f, "/x", "image_shape", shape, 3));
    if (nf_h5_attr_exists(f, "/x", "levels")) NF_TRY(nf_h5_attr_get_int64(f, "/x", "levels", &levels));
    for (int a = 0; a < 3; a++)
        if (shape[a] < 1 || shape[a] > (a < 2 ? NF_IMAGE_MAX_SIDE : 4))
            return nf_error(NF_EFORMAT, "%s:/x image_shape (%lld, %lld, %lld): expected height and width 1..%d and "
                            "1..4 channels", path, (long long)shape[0], (long long)shape[1], (long long)shape[2],
                            NF_IMAGE_MAX_SIDE);
    if ((size_t)(shape[0] * shape[1] * shape[2]) != d)
        return nf_error(NF_EFORMAT, "%s:/x has %zu columns but image_shape (%lld, %lld, %lld) needs %lld (h*w*c)", path,
                        d, (long long)shape[0], (long long)shape[1], (long long)shape[2],
                        (long long)(shape[0] * shape[1] * shape[2]));
    if (levels < 2 || levels > NF_IMAGE_MAX_LEVELS)
        return nf_error(NF_EFORMAT, "%s:/x levels is %lld (expected 2..%d)", path, (long long)levels,
                        NF_IMAGE_MAX_LEVELS);
    info->h = (int)shape[0], info->w = (int)shape[1], info->c = (int)shape[2], info->levels = (int)levels;
    if (nf_h5_exists(f, "/class_names")) {
        int64_t *labels;
        char **names;
        size_t K;
        NF_TRY(nf_image_labels_read(f, n, &labels, &names, &K));
        free(labels);
        if (names) nf_h5_strings_free(names, K);
        info->n_classes = (int)K;
    }
    return NF_OK;
}

int nf_image_set_load(const char *path, nf_image_set *s)
{
    memset(s, 0, sizeof *s);
    nf_h5 *f;
    NF_TRY(nf_h5_open(&f, path, NULL, 0));
    size_t d = 0, K = 0;
    int rc = NF_OK;
    if (!nf_h5_exists(f, "/x"))
        rc = nf_error(NF_EFORMAT, "%s: no dataset /x (expected images as an n x h*w*c array)", path);
    if (rc == NF_OK) rc = nf_h5_read_double(f, "/x", &s->x, &s->n, &d);
    if (rc == NF_OK) rc = nf_image_info_read(f, s->n, d, &s->info);
    if (rc == NF_OK) rc = nf_image_labels_read(f, s->n, &s->labels, &s->class_names, &K);
    if (rc == NF_OK) {
        char what[1100];
        snprintf(what, sizeof what, "%s:/x", path);
        rc = nf_image_check_values(what, &s->info, s->x, s->n);
    }
    nf_h5_close(f);
    if (rc != NF_OK) {
        free(s->x);
        free(s->labels);
        if (s->class_names) nf_h5_strings_free(s->class_names, K);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

int nf_image_samples_save(const char *path, const nf_real *x, size_t n, int h, int w, int c, int levels)
{
    nf_image_info info = {.h = h, .w = w, .c = c, .levels = levels};
    if (h < 1 || w < 1 || c < 1 || h > NF_IMAGE_MAX_SIDE || w > NF_IMAGE_MAX_SIDE || c > 4 || levels < 2 ||
        levels > NF_IMAGE_MAX_LEVELS || n == 0)
        return nf_error(NF_EINVAL, "%s: %zu images of %d x %d x %d with %d levels (expected at least one image, sides "
                        "1..%d, 1..4 channels, 2..%d levels)", path, n, h, w, c, levels, NF_IMAGE_MAX_SIDE,
                        NF_IMAGE_MAX_LEVELS);
    nf_h5 *f;
    NF_TRY(nf_h5_create(&f, path, "nf-data", 1));
    int rc = nf_h5_write_real(f, "/x", x, n, nf_image_info_dim(&info));
    if (rc == NF_OK) rc = nf_image_attrs_write(f, &info);
    if (rc == NF_OK) rc = nf_h5_attr_set_string(f, "/", "generator", "nf image sample");
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "n", (int64_t)n);
    if (rc == NF_OK) rc = nf_h5_attr_set_int64(f, "/", "dim", (int64_t)nf_image_info_dim(&info));
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    return nf_h5_commit(f);
}
