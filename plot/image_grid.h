/* plot/image_grid.h - a PNG of many small images side by side: a data set or a model's samples at
 * a glance.
 *
 * Images are NHWC rows (datasets/images.h): image r is h*w*c values, pixel (i, j) channel k at
 * (i*w + j)*c + k, grey (c = 1) or RGB (c = 3), as grey levels 0..levels-1 (model samples are real
 * numbers: they are rounded and clamped to that range).  The grid is rows x cols cells of one image
 * each, filled row by row, every image pixel drawn as a scale x scale block, with a gap of dark
 * grey between the cells and around the grid.  The file is written atomically, like every nf
 * picture, and the same inputs give the same bytes.
 *
 *   nf_image_grid g = {.h = 16, .w = 16, .c = 1, .levels = 256};   // layout and scale: defaults
 *   nf_image_grid_write_png("grid.png", &g, x, 64);
 */
#ifndef NF_PLOT_IMAGE_GRID_H
#define NF_PLOT_IMAGE_GRID_H

#include <stddef.h>

#include "core/error.h"

typedef struct nf_image_grid {
    int h, w, c;      /* the images: height, width, channels (1 grey, 3 RGB) */
    int levels;       /* values 0..levels-1 */
    int rows, cols;   /* the layout; 0, 0: cols = ceil(sqrt(n)), rows as few as hold n; one of
                         them given: the other as small as holds n */
    int scale;        /* screen pixels per image pixel; 0: the smallest that makes an image at
                         least 64 pixels on its shorter side (less if the grid would not fit) */
    int gap;          /* pixels between cells and around the grid; 0: 2; -1: none */
} nf_image_grid;

#define NF_IMAGE_GRID_MIN_PX 64

/* Write n images x (n, h*w*c) of g's shape to a PNG at path.  NF_EINVAL naming what is wrong: no
 * images, a channel count other than 1 or 3, a layout that holds fewer than n cells, a picture
 * beyond 32767 pixels on a side; NF_EIO if the file cannot be written (path then untouched). */
int nf_image_grid_write_png(const char *path, const nf_image_grid *g, const nf_real *x, size_t n);

#endif
