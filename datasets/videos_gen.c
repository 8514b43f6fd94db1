/* datasets/videos_gen.c - the video-sprites and video-balls generators (datasets/videos.h).
 *
 * Both move objects through a reflecting box.  A coordinate with start p0 in [lo, hi], velocity v
 * and L = hi - lo is, at frame t (exact: no time stepping, so no drift),
 *     u = (p0 - lo + v t) mod 2L   (taken in [0, 2L)),   p(t) = lo + (u <= L ? u : 2L - u),
 * the triangle wave of an elastic bounce off each wall.  Sprites move on integers (integer p0, v,
 * L, so p(t) is an integer and the pasted digit keeps exact grey levels); balls move on reals and
 * are anti-aliased.  All parameters are drawn first, in order, from one stream; the videos are then
 * rendered in parallel, each from its own parameters, so the result does not depend on threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "datasets/videos.h"

#define VG_PI 3.14159265358979323846
#define SPRITE_SIDE 8                               /* the digits' side */
#define SPRITE_PX (SPRITE_SIDE * NF_VIDEO_SPRITE_SCALE)
#define SPRITE_MAX_SPEED 3
#define BALLS_SUB 4                                 /* sub-samples per pixel side */
#define BALLS_MAX 2

/* The reflecting box on reals: p0 in [lo, lo + L], velocity v, frame t (formula above). */
static double reflect(double p0, double v, double t, double lo, double L)
{
    if (L <= 0) return lo;
    double u = fmod(p0 - lo + v * t, 2 * L);
    if (u < 0) u += 2 * L;
    return lo + (u <= L ? u : 2 * L - u);
}

/* The same on integers (exact): L >= 1. */
static long reflect_int(long p0, long v, long t, long L)
{
    long u = (p0 + v * t) % (2 * L);
    if (u < 0) u += 2 * L;
    return u <= L ? u : 2 * L - u;
}

static int check_common(const char *name, size_t n, int frames, int size, int min_size)
{
    if (n < 1 || n > NF_VIDEO_GEN_MAX_N)
        return nf_error(NF_EINVAL, "%s: %zu videos (expected 1..%d)", name, n, NF_VIDEO_GEN_MAX_N);
    if (frames < 1 || frames > NF_VIDEO_MAX_FRAMES)
        return nf_error(NF_EINVAL, "%s: %d frames (expected 1..%d)", name, frames, NF_VIDEO_MAX_FRAMES);
    if (size < min_size || size > NF_VIDEO_GEN_MAX_SIZE)
        return nf_error(NF_EINVAL, "%s: frame size %d (expected %d..%d pixels a side)", name, size, min_size,
                        NF_VIDEO_GEN_MAX_SIZE);
    size_t bytes = n * (size_t)frames * (size_t)size * (size_t)size * sizeof(double);
    if (bytes / n / sizeof(double) / (size_t)frames != (size_t)size * (size_t)size || bytes > ((size_t)1 << 36))
        return nf_error(NF_EINVAL, "%s: %zu videos of %d frames of %d x %d take more than 64 GiB", name, n, frames,
                        size, size);
    return NF_OK;
}

/* Allocate s's arrays for n videos of info (labels and K class names when K > 0). */
static int set_alloc(nf_video_set *s, const char *name, size_t n, nf_video_info info)
{
    s->info = info;
    s->x = malloc(n * nf_video_info_dim(&info) * sizeof *s->x);
    s->labels = malloc(n * sizeof *s->labels);
    s->class_names = calloc((size_t)info.n_classes, sizeof *s->class_names);
    if (!s->x || !s->labels || !s->class_names)
        return nf_error(NF_ENOMEM, "%s: out of memory for %zu videos of %d frames of %d x %d", name, n, info.frames,
                        info.h, info.w);
    return NF_OK;
}

static int name_set(char **dst, const char *src)
{
    if (!(*dst = malloc(strlen(src) + 1))) return nf_error(NF_ENOMEM, "out of memory for the class names");
    strcpy(*dst, src);
    return NF_OK;
}

/* ---- video-sprites --------------------------------------------------------------------------- */

typedef struct sprite_params {
    size_t digit;          /* row of the digit set */
    long x0, y0, vx, vy;   /* top-left corner and velocity, pixels (a frame) */
} sprite_params;

static long sprite_velocity(nf_rng *rng)
{
    long v = 1 + (long)nf_rng_index(rng, SPRITE_MAX_SPEED);
    return nf_rng_uniform(rng) < 0.5 ? -v : v;
}

/* One video: frame t shows the 2x digit with its top-left corner at reflect_int(...). */
static void sprite_render(const sprite_params *p, const double *digit, int frames, int size, double *v)
{
    long L = size - SPRITE_PX;
    size_t fd = (size_t)size * size;
    memset(v, 0, (size_t)frames * fd * sizeof *v);
    for (int t = 0; t < frames; t++) {
        long x = reflect_int(p->x0, p->vx, t, L), y = reflect_int(p->y0, p->vy, t, L);
        double *f = v + (size_t)t * fd;
        for (int i = 0; i < SPRITE_PX; i++)
            for (int j = 0; j < SPRITE_PX; j++)
                f[(size_t)(y + i) * size + (size_t)(x + j)] =
                    digit[(i / NF_VIDEO_SPRITE_SCALE) * SPRITE_SIDE + j / NF_VIDEO_SPRITE_SCALE];
    }
}

static int sprites_check_digits(const nf_image_set *d)
{
    if (!d || !d->x || d->n == 0)
        return nf_error(NF_EINVAL, "video-sprites: no digits given (expected the 8 x 8 digits of nf_image_digits)");
    const nf_image_info *in = &d->info;
    if (in->h != SPRITE_SIDE || in->w != SPRITE_SIDE || in->c != 1 || in->levels != 17)
        return nf_error(NF_EINVAL, "video-sprites: digits of %d x %d x %d with %d levels (expected 8 x 8 x 1 grey "
                        "images with 17 levels, the UCI digits)", in->h, in->w, in->c, in->levels);
    if (d->labels && (in->n_classes < 1 || !d->class_names))
        return nf_error(NF_EINVAL, "video-sprites: digits with labels but no class names");
    return nf_image_check_values("video-sprites: digits", in, d->x, d->n);
}

int nf_video_sprites(nf_video_set *s, const nf_image_set *digits, size_t n, int frames, int size, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    NF_TRY(check_common("video-sprites", n, frames, size, NF_VIDEO_SPRITE_MIN_SIZE));
    NF_TRY(sprites_check_digits(digits));
    int K = digits->labels ? digits->info.n_classes : 1;
    nf_video_info info = {.frames = frames, .h = size, .w = size, .c = 1, .levels = 17, .n_classes = K};
    sprite_params *par = malloc(n * sizeof *par);
    nf_rng *rng = nf_rng_alloc(seed, 0x737072697465); /* "sprite" */
    int rc = par && rng ? set_alloc(s, "video-sprites", n, info) : nf_error(NF_ENOMEM, "video-sprites: out of memory");
    for (int k = 0; rc == NF_OK && k < K; k++)
        rc = name_set(&s->class_names[k], digits->labels ? digits->class_names[k] : "digit");
    if (rc == NF_OK) {
        long L = size - SPRITE_PX;
        for (size_t i = 0; i < n; i++) {
            sprite_params *p = &par[i];
            p->digit = nf_rng_index(rng, digits->n);
            p->x0 = (long)nf_rng_index(rng, (size_t)L + 1);
            p->y0 = (long)nf_rng_index(rng, (size_t)L + 1);
            p->vx = sprite_velocity(rng);
            p->vy = sprite_velocity(rng);
            s->labels[i] = digits->labels ? digits->labels[p->digit] : 0;
        }
        size_t d = nf_video_info_dim(&info);
        long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > 64)
        for (long i = 0; i < nn; i++)
            sprite_render(&par[i], digits->x + par[i].digit * 64, frames, size, s->x + (size_t)i * d);
        s->n = n;
    }
    free(par);
    nf_rng_free(rng);
    if (rc != NF_OK) nf_video_set_free(s);
    return rc;
}

/* ---- video-balls ----------------------------------------------------------------------------- */

typedef struct ball_params {
    int count;                                /* 1 or 2 discs */
    double r[BALLS_MAX], x0[BALLS_MAX], y0[BALLS_MAX], vx[BALLS_MAX], vy[BALLS_MAX];
} ball_params;

static void balls_draw(nf_rng *rng, int size, ball_params *p)
{
    p->count = 1 + (int)nf_rng_index(rng, BALLS_MAX);
    for (int b = 0; b < p->count; b++) {
        double r = size * (0.08 + 0.06 * nf_rng_uniform(rng)), L = size - 2 * r;
        double speed = 1 + 1.5 * nf_rng_uniform(rng), a = 2 * VG_PI * nf_rng_uniform(rng);
        p->r[b] = r;
        p->x0[b] = r + L * nf_rng_uniform(rng);
        p->y0[b] = r + L * nf_rng_uniform(rng);
        p->vx[b] = speed * cos(a);
        p->vy[b] = speed * sin(a);
    }
}

/* Frame t: a pixel's value is round(255 min(1, sum_b coverage_b)), the coverage of disc b the
 * fraction of the pixel's 4 x 4 sample points within r_b of its centre (x right, y down; pixel
 * (i, j) covers [j, j+1) x [i, i+1)). */
static void balls_render(const ball_params *p, int frames, int size, double *v)
{
    size_t fd = (size_t)size * size;
    for (int t = 0; t < frames; t++) {
        double cx[BALLS_MAX], cy[BALLS_MAX];
        for (int b = 0; b < p->count; b++) {
            cx[b] = reflect(p->x0[b], p->vx[b], t, p->r[b], size - 2 * p->r[b]);
            cy[b] = reflect(p->y0[b], p->vy[b], t, p->r[b], size - 2 * p->r[b]);
        }
        double *f = v + (size_t)t * fd;
        for (int i = 0; i < size; i++)
            for (int j = 0; j < size; j++) {
                int hits = 0;
                for (int b = 0; b < p->count; b++) {
                    double r = p->r[b], r2 = r * r;
                    if (j + 1 < cx[b] - r || j > cx[b] + r || i + 1 < cy[b] - r || i > cy[b] + r) continue;
                    for (int a = 0; a < BALLS_SUB; a++)
                        for (int c = 0; c < BALLS_SUB; c++) {
                            double dx = j + (c + 0.5) / BALLS_SUB - cx[b], dy = i + (a + 0.5) / BALLS_SUB - cy[b];
                            hits += dx * dx + dy * dy <= r2;
                        }
                }
                double cov = (double)hits / (BALLS_SUB * BALLS_SUB);
                f[(size_t)i * size + j] = round(255 * (cov < 1 ? cov : 1));
            }
    }
}

int nf_video_balls(nf_video_set *s, size_t n, int frames, int size, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    NF_TRY(check_common("video-balls", n, frames, size, NF_VIDEO_GEN_MIN_SIZE));
    nf_video_info info = {.frames = frames, .h = size, .w = size, .c = 1, .levels = 256, .n_classes = BALLS_MAX};
    ball_params *par = malloc(n * sizeof *par);
    nf_rng *rng = nf_rng_alloc(seed, 0x62616c6c73); /* "balls" */
    int rc = par && rng ? set_alloc(s, "video-balls", n, info) : nf_error(NF_ENOMEM, "video-balls: out of memory");
    if (rc == NF_OK) rc = name_set(&s->class_names[0], "1");
    if (rc == NF_OK) rc = name_set(&s->class_names[1], "2");
    if (rc == NF_OK) {
        for (size_t i = 0; i < n; i++) {
            balls_draw(rng, size, &par[i]);
            s->labels[i] = par[i].count - 1;
        }
        size_t d = nf_video_info_dim(&info);
        long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > 64)
        for (long i = 0; i < nn; i++) balls_render(&par[i], frames, size, s->x + (size_t)i * d);
        s->n = n;
    }
    free(par);
    nf_rng_free(rng);
    if (rc != NF_OK) nf_video_set_free(s);
    return rc;
}
