/* datasets/images_shapes.c - the `shapes` image set: one disc, square or triangle per grey image.
 *
 * Each shape is given by its centre (cx, cy), circumradius R and rotation t (pixel units, x to the
 * right, y down; pixel (i, j) covers [j, j+1) x [i, i+1)):
 *
 *   disc      |p - c| <= R                                        area pi R^2       = 3.14 R^2
 *   square    |u| <= R/sqrt2 and |v| <= R/sqrt2,                  area 2 R^2        = 2.00 R^2
 *             (u, v) = p - c rotated by -t
 *   triangle  (p - c) . e_k <= R/2 for k = 0, 1, 2,                area 3 sqrt3/4 R^2 = 1.30 R^2
 *             e_k the unit vector at angle t + pi + 2 pi k / 3 (towards the side opposite vertex k)
 *
 * so at equal R the disc covers the most pixels and the triangle the fewest.  A pixel's coverage a
 * is the fraction of an 8 x 8 grid of points inside it that lie in the shape (anti-aliasing); its
 * grey level is round(bg + a (fg - bg)).  The parameters of all images are drawn first, in order,
 * from one stream; the images are then drawn in parallel, each from its own parameters only, so the
 * result does not depend on the thread count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "datasets/images.h"

#define SHAPES_SUB 8          /* sub-samples per pixel side */
#define SHAPES_MIN_CONTRAST 96
#define SHAPES_PI 3.14159265358979323846

static const char *const SHAPE_NAMES[3] = {"disc", "square", "triangle"};

typedef struct shape_params {
    int cls, fg, bg;
    double cx, cy, r, t;
} shape_params;

static void shape_draw(nf_rng *rng, int side, shape_params *p)
{
    p->cls = (int)nf_rng_index(rng, 3);
    p->r = side * (0.18 + 0.14 * nf_rng_uniform(rng));
    double lo = p->r + 0.5, span = side - 2 * lo;  /* the shape stays inside the image */
    p->cx = lo + span * nf_rng_uniform(rng);
    p->cy = lo + span * nf_rng_uniform(rng);
    p->t = 2 * SHAPES_PI * nf_rng_uniform(rng);
    do {
        p->fg = (int)nf_rng_index(rng, 256);
        p->bg = (int)nf_rng_index(rng, 256);
    } while (abs(p->fg - p->bg) < SHAPES_MIN_CONTRAST);
}

static int shape_inside(const shape_params *p, double e[3][2], double x, double y)
{
    double dx = x - p->cx, dy = y - p->cy;
    if (p->cls == 0) return dx * dx + dy * dy <= p->r * p->r;
    if (p->cls == 1) {
        double a = p->r * 0.70710678118654752440;
        return fabs(e[0][0] * dx + e[0][1] * dy) <= a && fabs(-e[0][1] * dx + e[0][0] * dy) <= a;
    }
    for (int k = 0; k < 3; k++)
        if (e[k][0] * dx + e[k][1] * dy > 0.5 * p->r) return 0;
    return 1;
}

/* One image (side x side grey levels) from its parameters. */
static void shape_render(const shape_params *p, int side, double *img)
{
    double e[3][2];
    if (p->cls == 1) {
        e[0][0] = cos(p->t), e[0][1] = sin(p->t);
    } else {
        for (int k = 0; k < 3; k++) {
            double a = p->t + SHAPES_PI + 2 * SHAPES_PI * k / 3;
            e[k][0] = cos(a), e[k][1] = sin(a);
        }
    }
    int x0 = (int)floor(p->cx - p->r) - 1, x1 = (int)ceil(p->cx + p->r) + 1;
    int y0 = (int)floor(p->cy - p->r) - 1, y1 = (int)ceil(p->cy + p->r) + 1;
    for (int i = 0; i < side; i++)
        for (int j = 0; j < side; j++) {
            int hits = 0;
            if (i >= y0 && i <= y1 && j >= x0 && j <= x1)
                for (int a = 0; a < SHAPES_SUB; a++)
                    for (int b = 0; b < SHAPES_SUB; b++)
                        hits += shape_inside(p, e, j + (b + 0.5) / SHAPES_SUB, i + (a + 0.5) / SHAPES_SUB);
            double cov = (double)hits / (SHAPES_SUB * SHAPES_SUB);
            img[i * side + j] = round(p->bg + cov * (p->fg - p->bg));
        }
}

int nf_image_shapes(nf_image_set *s, int side, size_t n, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (side != 16 && side != 32) return nf_error(NF_EINVAL, "shapes: image size %d (expected 16 or 32)", side);
    if (n < 1 || n > 100000000) return nf_error(NF_EINVAL, "shapes: %zu images (expected 1..100000000)", n);
    size_t d = (size_t)side * side;
    shape_params *par = malloc(n * sizeof *par);
    nf_rng *rng = nf_rng_alloc(seed, 0x7368617065); /* "shape" */
    s->x = malloc(n * d * sizeof *s->x);
    s->labels = malloc(n * sizeof *s->labels);
    s->class_names = calloc(3, sizeof *s->class_names);
    s->info = (nf_image_info){.h = side, .w = side, .c = 1, .levels = 256, .n_classes = 3};
    int rc = par && rng && s->x && s->labels && s->class_names
                 ? NF_OK : nf_error(NF_ENOMEM, "shapes: out of memory for %zu images of %d x %d", n, side, side);
    for (int k = 0; rc == NF_OK && k < 3; k++)
        if (!(s->class_names[k] = malloc(strlen(SHAPE_NAMES[k]) + 1)))
            rc = nf_error(NF_ENOMEM, "shapes: out of memory");
        else strcpy(s->class_names[k], SHAPE_NAMES[k]);
    if (rc == NF_OK) {
        for (size_t i = 0; i < n; i++) {
            shape_draw(rng, side, &par[i]);
            s->labels[i] = par[i].cls;
        }
        long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > 256)
        for (long i = 0; i < nn; i++) shape_render(&par[i], side, s->x + (size_t)i * d);
        s->n = n;
    }
    free(par);
    nf_rng_free(rng);
    if (rc != NF_OK) nf_image_set_free(s);
    return rc;
}
