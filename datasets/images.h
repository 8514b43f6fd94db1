/* datasets/images.h - image data: the image attributes of a data file, the shapes generator, the
 * handwritten digits, and PNG folders and NPY arrays brought in as images.
 *
 * An image data file is an ordinary nf data file (docs/FORMATS.md, "Image data"), so nf fit reads
 * it as rows.  Images are NHWC, channels last, row-major: image r of height h, width w and c
 * channels is row r of /x, h*w*c values, pixel (i, j) channel k at (i*w + j)*c + k.  The values are
 * the integer grey levels 0..levels-1 (float64 on disk).  /x carries two attributes, `image_shape`
 * (int64[3] = h, w, c) and `levels` (int64).  Class labels, when there are any, are stored three
 * ways: /labels (n,) int64 in 0..K-1, /class_names (K,) strings, and the project's one-hot
 * categorical context /context (n, K) named "class=<name>" in /context_names, so a conditional
 * flow learns p(image | class) with no extra step.
 *
 *   nf_image_set s;
 *   nf_image_shapes(&s, 32, 10000, seed);          // or nf_image_digits, nf_image_import_png_dir, ...
 *   nf_h5_create(&f, "shapes.h5", "nf-data", 1);
 *   nf_image_set_write(f, &s);                      // /x with its attributes, the labels
 *   ... root attributes ..., nf_h5_commit(f);
 *   nf_image_set_free(&s);
 *
 * Every reader checks what it reads and names the file, the image and what was expected.
 */
#ifndef NF_DATASETS_IMAGES_H
#define NF_DATASETS_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/h5.h"

#define NF_IMAGE_MAX_SIDE 4096       /* height and width */
#define NF_IMAGE_MAX_LEVELS 65536
#define NF_IMAGE_MAX_CLASSES 1000

typedef struct nf_image_info {
    int h, w, c;                     /* height, width, channels (1 grey, 3 RGB) */
    int levels;                      /* grey levels: values are integers 0..levels-1 */
    int n_classes;                   /* 0 without labels */
} nf_image_info;

/* A set of n images in memory with their labels. */
typedef struct nf_image_set {
    nf_image_info info;
    size_t n;
    double *x;                       /* (n, h*w*c) grey levels */
    int64_t *labels;                 /* (n) in 0..n_classes-1, or NULL */
    char **class_names;              /* (n_classes) names, or NULL */
} nf_image_set;

void nf_image_set_free(nf_image_set *s);   /* NULL-safe; zeroes the struct */
/* h*w*c, the width of a row. */
size_t nf_image_info_dim(const nf_image_info *info);

/* NF_OK if every value of x (n images of info's shape) is an integer in 0..levels-1; otherwise
 * NF_EDATA naming `what`, the image, the pixel (row, column, channel) and the value. */
int nf_image_check_values(const char *what, const nf_image_info *info, const double *x, size_t n);

/* Write /x (n, h*w*c) float64 with its attributes image_shape and levels; with labels also
 * /labels, /class_names, and the one-hot /context with /context_names "class=<name>". */
int nf_image_set_write(nf_h5 *f, const nf_image_set *s);
/* The image attributes of /x (d its width, which must be h*w*c), and the number of classes from
 * /labels and /class_names when present (n rows).  NF_EFORMAT naming the file when /x has no
 * image_shape (not an image file) or the attributes do not fit together. */
int nf_image_info_read(nf_h5 *f, size_t n, size_t d, nf_image_info *info);
/* Only the attributes on /x (image_shape and levels): what nf data split adds to the rows, labels
 * and context it gathers itself. */
int nf_image_attrs_write(nf_h5 *f, const nf_image_info *info);
/* /labels (n) and /class_names (K) of an image file (*labels NULL and *K 0 when there are none);
 * every label must lie in 0..K-1.  Free the names with nf_h5_strings_free. */
int nf_image_labels_read(nf_h5 *f, size_t n, int64_t **labels, char ***names, size_t *K);
/* Write n labels 0..K-1 as /labels, the names as /class_names and the one-hot /context named
 * "class=<name>" in /context_names (images' and videos' labels alike). */
int nf_image_labels_write(nf_h5 *f, const int64_t *labels, size_t n, char *const *class_names, int n_classes);
/* n class labels from an NPY of integers 0..K-1 (K <= NF_IMAGE_MAX_CLASSES), classes named "0".."K-1";
 * `item` ("image", "video") names the rows in messages.  *labels and *names are new arrays (NULL on
 * failure). */
int nf_npy_class_labels(const char *path, size_t n, const char *item, int64_t **labels, char ***names, int *K);
/* The whole image file: rows, attributes, labels; values checked as nf_image_check_values. */
int nf_image_set_load(const char *path, nf_image_set *s);
/* Images made by a model (real numbers, not checked against the levels) as an nf-data file at path,
 * written atomically: /x (n, h*w*c) in the build's precision with image_shape and levels, and the
 * root attributes generator ("nf image sample"), n and dim, so nf data show draws it and nf fit
 * reads it. */
int nf_image_samples_save(const char *path, const nf_real *x, size_t n, int h, int w, int c, int levels);

/* The `shapes` set: n grey images of side (16 or 32 pixels), each one disc (class 0), square
 * (class 1) or triangle (class 2) with a uniform class, a random centre, size and (square,
 * triangle) rotation, and random foreground and background grey levels at least 96 apart;
 * anti-aliased by 8 x 8 sampling of each pixel, quantised to 256 levels.  The same seed gives the
 * same images whatever the thread count. */
int nf_image_shapes(nf_image_set *s, int side, size_t n, uint64_t seed);

/* The 1,797 8 x 8 handwritten digits (17 grey levels, labels 0..9) from a gzip CSV of 65 integer
 * columns: 64 pixels, then the label (the UCI optical digits test set; data/digits.csv.gz). */
int nf_image_digits(nf_image_set *s, const char *path);

/* Every *.png in dir (sorted by name), or, when dir has sub-folders, every *.png in each
 * sub-folder with the sub-folder's name as its class (classes sorted by name).  Grey images: the
 * luma 0.299 R + 0.587 G + 0.114 B of each pixel rounded to 0..255; rgb = 1 keeps three channels.
 * Every file must have the size of the first (NF_EFORMAT naming the first that differs). */
int nf_image_import_png_dir(nf_image_set *s, const char *dir, int rgb);

/* An NPY image array (n, H, W) or (n, H, W, C) of any integer or real type whose values are
 * integers in 0..levels-1 (levels 0 means 256); labels (may be NULL) an NPY of n integers 0..K-1,
 * whose classes are named by their numbers. */
int nf_image_import_npy(nf_image_set *s, const char *path, const char *labels, int levels);

#endif
