/* datasets/images_import.c - images from outside: the handwritten digits (gzip CSV, read with
 * zlib), a folder of PNG files (read with cairo), an NPY image array (core/import.h). */
#include <cairo.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/import.h"
#include "datasets/images.h"

/* Class names "0", "1", ..., "K-1" into s (s->info.n_classes = K). */
static int number_names(nf_image_set *s, int K)
{
    if (!(s->class_names = calloc((size_t)K, sizeof *s->class_names))) return nf_error(NF_ENOMEM, "out of memory");
    s->info.n_classes = K;
    for (int k = 0; k < K; k++) {
        if (!(s->class_names[k] = malloc(12))) return nf_error(NF_ENOMEM, "out of memory");
        snprintf(s->class_names[k], 12, "%d", k);
    }
    return NF_OK;
}

/* ---- digits ------------------------------------------------------------------------------------ */

#define DIGITS_SIDE 8
#define DIGITS_COLS (DIGITS_SIDE * DIGITS_SIDE + 1)

/* One CSV line of 64 pixels 0..16 and a label 0..9 into px and *label. */
static int digits_line(const char *path, long line, const char *text, double *px, int64_t *label)
{
    const char *p = text;
    for (int k = 0; k < DIGITS_COLS; k++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        int top = k < DIGITS_COLS - 1 ? 16 : 9;
        if (end == p || errno)
            return nf_error(NF_EFORMAT, "%s: line %ld, column %d: not an integer (expected %d comma-separated "
                            "integers: 64 pixels 0..16, then the label 0..9)", path, line, k + 1, DIGITS_COLS);
        if (v < 0 || v > top)
            return nf_error(NF_EDATA, "%s: line %ld, column %d is %ld (expected %s 0..%d)", path, line, k + 1, v,
                            k < DIGITS_COLS - 1 ? "a grey level" : "a label", top);
        if (k < DIGITS_COLS - 1) px[k] = (double)v;
        else *label = v;
        p = end;
        while (*p == ' ') p++;
        if (k < DIGITS_COLS - 1 && *p++ != ',')
            return nf_error(NF_EFORMAT, "%s: line %ld has %d values (expected %d: 64 pixels, then the label)", path,
                            line, k + 1, DIGITS_COLS);
    }
    while (*p == ' ' || *p == '\r' || *p == '\n') p++;
    if (*p)
        return nf_error(NF_EFORMAT, "%s: line %ld has more than %d values (expected 64 pixels, then the label)", path,
                        line, DIGITS_COLS);
    return NF_OK;
}

int nf_image_digits(nf_image_set *s, const char *path)
{
    memset(s, 0, sizeof *s);
    gzFile gz = gzopen(path, "rb");
    if (!gz) return nf_error(NF_EIO, "%s: cannot open (%s)", path, errno ? strerror(errno) : "zlib failed");
    char text[1024];
    size_t cap = 0;
    long line = 0;
    int rc = NF_OK;
    s->info = (nf_image_info){.h = DIGITS_SIDE, .w = DIGITS_SIDE, .c = 1, .levels = 17};
    while (rc == NF_OK && gzgets(gz, text, sizeof text)) {
        line++;
        if (text[strspn(text, " \r\n")] == '\0') continue;
        if (s->n == cap) {
            cap = cap ? 2 * cap : 2048;
            double *x = realloc(s->x, cap * (DIGITS_COLS - 1) * sizeof *x);
            int64_t *l = x ? realloc(s->labels, cap * sizeof *l) : NULL;
            if (x) s->x = x;
            if (l) s->labels = l;
            if (!x || !l) {
                rc = nf_error(NF_ENOMEM, "%s: out of memory at line %ld", path, line);
                break;
            }
        }
        rc = digits_line(path, line, text, s->x + s->n * (DIGITS_COLS - 1), s->labels + s->n);
        s->n++;
    }
    int err;
    const char *zmsg = gzerror(gz, &err);
    if (rc == NF_OK && err != Z_OK && err != Z_STREAM_END)
        rc = nf_error(NF_EFORMAT, "%s: damaged gzip file after line %ld (%s)", path, line, zmsg);
    gzclose(gz);
    if (rc == NF_OK && s->n == 0) rc = nf_error(NF_EDATA, "%s: no images (expected lines of 64 pixels and a label)", path);
    if (rc == NF_OK) rc = number_names(s, 10);
    if (rc != NF_OK) nf_image_set_free(s);
    return rc;
}

/* ---- PNG folders ----------------------------------------------------------------------------- */

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static void names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int names_add(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return nf_error(NF_ENOMEM, "out of memory listing files");
        l->v = v, l->cap = cap;
    }
    if (!(l->v[l->n] = malloc(strlen(name) + 1))) return nf_error(NF_ENOMEM, "out of memory listing files");
    strcpy(l->v[l->n++], name);
    return NF_OK;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_png_name(const char *name)
{
    size_t L = strlen(name);
    return L > 4 && name[0] != '.' && !strcasecmp(name + L - 4, ".png");
}

/* The PNG files (pngs) and the sub-folders (dirs) of dir, each sorted by name; hidden entries are
 * left out. */
static int list_dir(const char *dir, name_list *pngs, name_list *dirs)
{
    DIR *dp = opendir(dir);
    if (!dp) return nf_error(NF_EIO, "%s: cannot open the folder (%s)", dir, strerror(errno));
    int rc = NF_OK;
    struct dirent *e;
    char path[4096];
    while (rc == NF_OK && (e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && dirs) rc = names_add(dirs, e->d_name);
        else if (S_ISREG(st.st_mode) && is_png_name(e->d_name)) rc = names_add(pngs, e->d_name);
    }
    closedir(dp);
    if (pngs->n) qsort(pngs->v, pngs->n, sizeof *pngs->v, by_name);
    if (dirs && dirs->n) qsort(dirs->v, dirs->n, sizeof *dirs->v, by_name);
    return rc;
}

typedef struct png_reader {
    nf_image_set *s;
    size_t cap;                  /* images s->x has room for */
    char first[4096];            /* the first file, whose size every other must have */
    int rgb;
} png_reader;

/* Append the image in path (with label, or -1) to the set. */
static int png_add(png_reader *r, const char *path, int64_t label)
{
    unsigned char sig[8] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) return nf_error(NF_EIO, "%s: cannot open (%s)", path, strerror(errno));
    size_t got = fread(sig, 1, sizeof sig, fp);
    fclose(fp);
    if (got != sizeof sig || memcmp(sig, "\x89PNG\r\n\x1a\n", 8))
        return nf_error(NF_EFORMAT, "%s: cannot read the PNG (the file does not start with the PNG signature)", path);
    /* cairo reports a damaged PNG as "out of memory" too: every failure here is the file's */
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    cairo_status_t st = cairo_surface_status(img);
    if (st != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return nf_error(NF_EFORMAT, "%s: cannot read the PNG (cairo: %s; a damaged file?)", path,
                        cairo_status_to_string(st));
    }
    nf_image_set *s = r->s;
    int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
    int rc = NF_OK;
    if (s->n == 0) {
        if (w > NF_IMAGE_MAX_SIDE || h > NF_IMAGE_MAX_SIDE)
            rc = nf_error(NF_EFORMAT, "%s is %d x %d pixels (expected at most %d on a side)", path, w, h,
                          NF_IMAGE_MAX_SIDE);
        s->info = (nf_image_info){.h = h, .w = w, .c = r->rgb ? 3 : 1, .levels = 256, .n_classes = s->info.n_classes};
        snprintf(r->first, sizeof r->first, "%.4000s", path); /* for messages: a longer path is cut */
    } else if (w != s->info.w || h != s->info.h) {
        rc = nf_error(NF_EFORMAT, "%s is %d x %d pixels (width x height), but %s, the first image, is %d x %d "
                      "(expected every image the same size)", path, w, h, r->first, s->info.w, s->info.h);
    }
    size_t d = nf_image_info_dim(&s->info);
    if (rc == NF_OK && s->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        double *x = realloc(s->x, cap * d * sizeof *x);
        int64_t *l = x ? realloc(s->labels, cap * sizeof *l) : NULL;
        if (x) s->x = x;
        if (l) s->labels = l, r->cap = cap;
        if (!x || !l) rc = nf_error(NF_ENOMEM, "out of memory for %zu images of %d x %d", cap, w, h);
    }
    if (rc == NF_OK) {
        cairo_surface_flush(img);
        const unsigned char *data = cairo_image_surface_get_data(img);
        int stride = cairo_image_surface_get_stride(img);
        cairo_format_t fmt = cairo_image_surface_get_format(img);
        double *out = s->x + s->n * d;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                double rgb[3];
                if (fmt == CAIRO_FORMAT_A8) {
                    rgb[0] = rgb[1] = rgb[2] = data[(size_t)i * stride + j];
                } else { /* ARGB32 / RGB24: premultiplied, so a transparent pixel is over black */
                    uint32_t px = *(const uint32_t *)(data + (size_t)i * stride + 4 * (size_t)j);
                    rgb[0] = px >> 16 & 255, rgb[1] = px >> 8 & 255, rgb[2] = px & 255;
                }
                double *o = out + ((size_t)i * w + j) * (size_t)s->info.c;
                if (r->rgb) o[0] = rgb[0], o[1] = rgb[1], o[2] = rgb[2];
                else o[0] = round(0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]);
            }
        s->labels[s->n++] = label;
    }
    cairo_surface_destroy(img);
    return rc;
}

/* Every PNG of the list (in folder dir) with label. */
static int png_add_all(png_reader *r, const char *dir, const name_list *pngs, int64_t label)
{
    char path[8192];
    for (size_t i = 0; i < pngs->n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, pngs->v[i]);
        NF_TRY(png_add(r, path, label));
    }
    return NF_OK;
}

int nf_image_import_png_dir(nf_image_set *s, const char *dir, int rgb)
{
    memset(s, 0, sizeof *s);
    name_list pngs = {0}, dirs = {0};
    png_reader r = {.s = s, .rgb = rgb};
    int rc = list_dir(dir, &pngs, &dirs);
    if (rc == NF_OK && dirs.n == 0 && pngs.n == 0)
        rc = nf_error(NF_EDATA, "%s: no .png files and no sub-folders (expected PNG images, or one sub-folder of PNG "
                      "images per class)", dir);
    if (rc == NF_OK && dirs.n && pngs.n)
        rc = nf_error(NF_EFORMAT, "%s holds both PNG files (%s) and sub-folders (%s); expected either PNG images or "
                      "one sub-folder of PNG images per class", dir, pngs.v[0], dirs.v[0]);
    if (rc == NF_OK && dirs.n > NF_IMAGE_MAX_CLASSES)
        rc = nf_error(NF_EFORMAT, "%s has %zu sub-folders (expected at most %d classes)", dir, dirs.n,
                      NF_IMAGE_MAX_CLASSES);
    if (rc == NF_OK && !dirs.n) rc = png_add_all(&r, dir, &pngs, -1);
    if (rc == NF_OK && dirs.n) s->info.n_classes = (int)dirs.n;
    char sub[4096];
    for (size_t k = 0; rc == NF_OK && k < dirs.n; k++) {
        name_list files = {0};
        snprintf(sub, sizeof sub, "%s/%s", dir, dirs.v[k]);
        rc = list_dir(sub, &files, NULL);
        if (rc == NF_OK && files.n == 0)
            rc = nf_error(NF_EDATA, "%s: no .png files (expected the images of class '%s')", sub, dirs.v[k]);
        if (rc == NF_OK) rc = png_add_all(&r, sub, &files, (int64_t)k);
        names_free(&files);
    }
    if (rc == NF_OK && dirs.n) {
        s->class_names = dirs.v; /* the sub-folders' names, sorted: the classes */
        dirs.v = NULL, dirs.n = 0;
    } else if (rc == NF_OK) {
        free(s->labels);
        s->labels = NULL;
    }
    names_free(&pngs);
    names_free(&dirs);
    if (rc != NF_OK) {
        s->info.n_classes = 0; /* the names were never handed over */
        nf_image_set_free(s);
    }
    return rc;
}

/* ---- NPY ------------------------------------------------------------------------------------- */

int nf_npy_class_labels(const char *path, size_t n, const char *item, int64_t **labels, char ***names, int *K)
{
    *labels = NULL, *names = NULL, *K = 0;
    nf_table t;
    NF_TRY(nf_import_npy(path, &t));
    int rc = NF_OK;
    double top = -1;
    if (t.n != n || t.d != 1)
        rc = nf_error(NF_EFORMAT, "%s: %zu x %zu labels for %zu %ss (expected one integer label per %s)", path, t.n,
                      t.d, n, item, item);
    for (size_t i = 0; rc == NF_OK && i < t.n; i++) {
        double v = t.x[i];
        if (!(v >= 0 && v < NF_IMAGE_MAX_CLASSES && v == floor(v)))
            rc = nf_error(NF_EDATA, "%s: label of %s %zu is %g (expected an integer class 0..%d)", path, item, i, v,
                          NF_IMAGE_MAX_CLASSES - 1);
        else if (v > top) top = v;
    }
    const int k_all = (int)top + 1;
    if (rc == NF_OK && (!(*labels = malloc((n ? n : 1) * sizeof **labels)) ||
                        !(*names = calloc((size_t)k_all, sizeof **names))))
        rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; rc == NF_OK && i < t.n; i++) (*labels)[i] = (int64_t)t.x[i];
    for (int k = 0; rc == NF_OK && k < k_all; k++)
        if (!((*names)[k] = malloc(12))) rc = nf_error(NF_ENOMEM, "%s: out of memory", path);
        else snprintf((*names)[k], 12, "%d", k);
    nf_table_free(&t);
    if (rc != NF_OK) {
        for (int k = 0; *names && k < k_all; k++) free((*names)[k]);
        free(*names), free(*labels);
        *names = NULL, *labels = NULL;
        return rc;
    }
    *K = k_all;
    return NF_OK;
}

int nf_image_import_npy(nf_image_set *s, const char *path, const char *labels, int levels)
{
    memset(s, 0, sizeof *s);
    if (levels == 0) levels = 256;
    if (levels < 2 || levels > NF_IMAGE_MAX_LEVELS)
        return nf_error(NF_EINVAL, "%d grey levels (expected 2..%d)", levels, NF_IMAGE_MAX_LEVELS);
    nf_table t;
    size_t shape[NF_IMPORT_NPY_MAX_DIMS];
    int nd = 0;
    NF_TRY(nf_import_npy_nd(path, &t, shape, &nd));
    int rc = NF_OK;
    if (nd != 3 && nd != 4)
        rc = nf_error(NF_EFORMAT, "%s: a %d-D array (expected images: (n, height, width) or (n, height, width, "
                      "channels))", path, nd);
    else if (shape[1] > NF_IMAGE_MAX_SIDE || shape[2] > NF_IMAGE_MAX_SIDE || (nd == 4 && shape[3] > 4))
        rc = nf_error(NF_EFORMAT, "%s: images of %zu x %zu pixels and %zu channels (expected at most %d on a side, "
                      "1..4 channels%s)", path, shape[1], shape[2], nd == 4 ? shape[3] : 1, NF_IMAGE_MAX_SIDE,
                      nd == 4 && shape[3] > 4 ? "; for videos (n, frames, height, width) give --video" : "");
    if (rc == NF_OK) {
        s->info = (nf_image_info){.h = (int)shape[1], .w = (int)shape[2], .c = nd == 4 ? (int)shape[3] : 1,
                                  .levels = levels};
        s->n = t.n;
        s->x = t.x;
        t.x = NULL;
        rc = nf_image_check_values(path, &s->info, s->x, s->n);
    }
    if (rc == NF_OK && labels)
        rc = nf_npy_class_labels(labels, s->n, "image", &s->labels, &s->class_names, &s->info.n_classes);
    nf_table_free(&t);
    if (rc != NF_OK) nf_image_set_free(s);
    return rc;
}
