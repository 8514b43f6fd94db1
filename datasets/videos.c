/* datasets/videos.c - video data files: the attributes of /x, the labels three ways (/labels,
 * /class_names, the one-hot /context), the check of grey levels, loading a whole video file, and
 * NPY arrays brought in as videos (datasets/videos.h).  The generators: datasets/videos_gen.c. */
#include "datasets/videos.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/import.h"

void nf_video_set_free(nf_video_set *s)
{
    if (!s) return;
    free(s->x);
    free(s->labels);
    if (s->class_names) nf_h5_strings_free(s->class_names, (size_t)s->info.n_classes);
    memset(s, 0, sizeof *s);
}

size_t nf_video_frame_dim(const nf_video_info *info)
{
    return (size_t)info->h * (size_t)info->w * (size_t)info->c;
}

size_t nf_video_info_dim(const nf_video_info *info)
{
    return (size_t)info->frames * nf_video_frame_dim(info);
}

int nf_video_check_values(const char *what, const nf_video_info *info, const double *x, size_t n)
{
    size_t d = nf_video_info_dim(info), fd = nf_video_frame_dim(info);
    double top = info->levels - 1;
    for (size_t r = 0; r < n; r++)
        for (size_t e = 0; e < d; e++) {
            double v = x[r * d + e];
            if (v >= 0 && v <= top && v == floor(v)) continue;
            size_t t = e / fd, in = e % fd, k = in % (size_t)info->c, pix = in / (size_t)info->c;
            return nf_error(NF_EDATA, "%s: video %zu, frame %zu, pixel (%zu, %zu) channel %zu is %g (expected an "
                            "integer grey level 0..%d)", what, r, t, pix / (size_t)info->w, pix % (size_t)info->w,
                            k, v, info->levels - 1);
        }
    return NF_OK;
}

int nf_video_attrs_write(nf_h5 *f, const nf_video_info *info)
{
    int64_t shape[4] = {info->frames, info->h, info->w, info->c};
    NF_TRY(nf_h5_attr_set_int64s(f, "/x", "video_shape", shape, 4));
    return nf_h5_attr_set_int64(f, "/x", "levels", info->levels);
}

int nf_video_set_write(nf_h5 *f, const nf_video_set *s)
{
    NF_TRY(nf_h5_write_double(f, "/x", s->x, s->n, nf_video_info_dim(&s->info)));
    NF_TRY(nf_video_attrs_write(f, &s->info));
    if (s->labels && s->info.n_classes > 0)
        NF_TRY(nf_image_labels_write(f, s->labels, s->n, s->class_names, s->info.n_classes));
    return NF_OK;
}

int nf_video_file_is(nf_h5 *f)
{
    int is = nf_h5_exists(f, "/x") == 1 && nf_h5_attr_exists(f, "/x", "video_shape") == 1;
    nf_error_clear();
    return is;
}

int nf_video_info_read_h5(nf_h5 *f, size_t n, size_t d, nf_video_info *info)
{
    const char *path = nf_h5_path(f);
    memset(info, 0, sizeof *info);
    if (!nf_h5_attr_exists(f, "/x", "video_shape") && nf_h5_attr_exists(f, "/x", "image_shape"))
        return nf_error(NF_EFORMAT, "%s holds images (/x has image_shape), not videos: nf image fit / eval / sample "
                        "read it", path);
    if (!nf_h5_attr_exists(f, "/x", "video_shape"))
        return nf_error(NF_EFORMAT, "%s:/x has no attribute video_shape (expected a video data file: nf data make "
                        "video-sprites|video-balls or nf data import of a video NPY)", path);
    int64_t s[4], levels = 256;
    NF_TRY(nf_h5_attr_get_int64s(f, "/x", "video_shape", s, 4));
    if (nf_h5_attr_exists(f, "/x", "levels")) NF_TRY(nf_h5_attr_get_int64(f, "/x", "levels", &levels));
    const int64_t hi[4] = {NF_VIDEO_MAX_FRAMES, NF_VIDEO_MAX_SIDE, NF_VIDEO_MAX_SIDE, 4};
    for (int a = 0; a < 4; a++)
        if (s[a] < 1 || s[a] > hi[a])
            return nf_error(NF_EFORMAT, "%s:/x video_shape (%lld, %lld, %lld, %lld): expected 1..%d frames, height "
                            "and width 1..%d and 1..4 channels", path, (long long)s[0], (long long)s[1],
                            (long long)s[2], (long long)s[3], NF_VIDEO_MAX_FRAMES, NF_VIDEO_MAX_SIDE);
    long long need = (long long)(s[0] * s[1] * s[2] * s[3]);
    if ((long long)d != need)
        return nf_error(NF_EFORMAT, "%s:/x has %zu columns but video_shape (%lld, %lld, %lld, %lld) needs %lld "
                        "(T*h*w*c)", path, d, (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3],
                        need);
    if (levels < 2 || levels > NF_VIDEO_MAX_LEVELS)
        return nf_error(NF_EFORMAT, "%s:/x levels is %lld (expected 2..%d)", path, (long long)levels,
                        NF_VIDEO_MAX_LEVELS);
    *info = (nf_video_info){.frames = (int)s[0], .h = (int)s[1], .w = (int)s[2], .c = (int)s[3],
                            .levels = (int)levels};
    if (nf_h5_exists(f, "/class_names") || nf_h5_exists(f, "/labels")) {
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

/* Open path and check /x is a 2-D dataset: its shape in *n, *d. */
static int open_x(const char *path, nf_h5 **f, size_t *n, size_t *d)
{
    NF_TRY(nf_h5_open(f, path, NULL, 0));
    int rank = 0;
    size_t dims[2] = {0, 0};
    int rc = nf_h5_exists(*f, "/x") == 1
                 ? NF_OK : nf_error(NF_EFORMAT, "%s: no dataset /x (expected videos as an n x T*h*w*c array)", path);
    if (rc == NF_OK) rc = nf_h5_shape(*f, "/x", &rank, dims);
    if (rc == NF_OK && rank != 2)
        rc = nf_error(NF_EFORMAT, "%s:/x is %d-D (expected videos as a 2-D n x T*h*w*c array)", path, rank);
    if (rc != NF_OK) {
        nf_h5_close(*f);
        *f = NULL;
        return rc;
    }
    *n = dims[0], *d = dims[1];
    return NF_OK;
}

int nf_video_info_read(const char *path, nf_video_info *info, size_t *n)
{
    nf_h5 *f;
    size_t rows, d;
    memset(info, 0, sizeof *info);
    NF_TRY(open_x(path, &f, &rows, &d));
    int rc = nf_video_info_read_h5(f, rows, d, info);
    nf_h5_close(f);
    if (rc == NF_OK && n) *n = rows;
    return rc;
}

int nf_video_set_load(const char *path, nf_video_set *s)
{
    memset(s, 0, sizeof *s);
    nf_h5 *f;
    size_t rows, d, K = 0;
    NF_TRY(open_x(path, &f, &rows, &d));
    int rc = nf_video_info_read_h5(f, rows, d, &s->info);
    if (rc == NF_OK) rc = nf_h5_read_double(f, "/x", &s->x, &s->n, &d);
    if (rc == NF_OK) rc = nf_image_labels_read(f, s->n, &s->labels, &s->class_names, &K);
    if (rc == NF_OK) {
        char what[1100];
        snprintf(what, sizeof what, "%s:/x", path);
        rc = nf_video_check_values(what, &s->info, s->x, s->n);
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

/* ---- NPY ------------------------------------------------------------------------------------- */

int nf_video_import_npy(nf_video_set *s, const char *path, const char *labels, int levels)
{
    memset(s, 0, sizeof *s);
    if (levels == 0) levels = 256;
    if (levels < 2 || levels > NF_VIDEO_MAX_LEVELS)
        return nf_error(NF_EINVAL, "%d grey levels (expected 2..%d)", levels, NF_VIDEO_MAX_LEVELS);
    nf_table t;
    size_t sh[NF_IMPORT_NPY_MAX_DIMS];
    int nd = 0;
    NF_TRY(nf_import_npy_nd(path, &t, sh, &nd));
    int rc = NF_OK;
    if (nd != 4 && nd != 5)
        rc = nf_error(NF_EFORMAT, "%s: a %d-D array (expected videos: (n, frames, height, width) or (n, frames, "
                      "height, width, channels))", path, nd);
    else if (sh[1] < 1 || sh[1] > NF_VIDEO_MAX_FRAMES || sh[2] > NF_VIDEO_MAX_SIDE || sh[3] > NF_VIDEO_MAX_SIDE ||
             (nd == 5 && (sh[4] < 1 || sh[4] > 4)))
        rc = nf_error(NF_EFORMAT, "%s: videos of %zu frames of %zu x %zu pixels and %zu channels (expected 1..%d "
                      "frames, at most %d on a side, 1..4 channels)", path, sh[1], sh[2], sh[3], nd == 5 ? sh[4] : 1,
                      NF_VIDEO_MAX_FRAMES, NF_VIDEO_MAX_SIDE);
    else if (t.n == 0)
        rc = nf_error(NF_EFORMAT, "%s: no videos (the array's first side is 0)", path);
    if (rc == NF_OK) {
        s->info = (nf_video_info){.frames = (int)sh[1], .h = (int)sh[2], .w = (int)sh[3],
                                  .c = nd == 5 ? (int)sh[4] : 1, .levels = levels};
        s->n = t.n;
        s->x = t.x;
        t.x = NULL;
        rc = nf_video_check_values(path, &s->info, s->x, s->n);
    }
    if (rc == NF_OK && labels)
        rc = nf_npy_class_labels(labels, s->n, "video", &s->labels, &s->class_names, &s->info.n_classes);
    nf_table_free(&t);
    if (rc != NF_OK) nf_video_set_free(s);
    return rc;
}
