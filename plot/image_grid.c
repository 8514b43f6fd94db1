/* plot/image_grid.c - many small images in one PNG (plot/image_grid.h). */
#include "plot/image_grid.h"

#include <cairo.h>
#include <math.h>
#include <stdint.h>

#include "plot/plot_internal.h"

#define GRID_MAX_SIDE 32767       /* cairo's limit on an image surface's side */
#define GRID_GAP_RGB 0x404040u

/* A value of 0..levels-1 (rounded, clamped) as 0..255. */
static uint32_t grey_byte(double v, int levels)
{
    double top = levels - 1;
    if (!(v > 0)) v = 0; /* NaN too */
    if (v > top) v = top;
    return (uint32_t)lround(round(v) * 255.0 / top);
}

/* Fill the layout and scale left open in o; NF_EINVAL when it cannot hold n or does not fit. */
static int grid_layout(size_t n, int h, int w, nf_image_grid *o)
{
    if (o->rows < 0 || o->cols < 0 || o->scale < 0 || o->gap < -1)
        return nf_error(NF_EINVAL, "image grid: rows %d, cols %d, scale %d, gap %d (expected 0 or more; gap -1 for "
                        "none)", o->rows, o->cols, o->scale, o->gap);
    if (o->gap == 0) o->gap = 2;
    if (o->gap < 0) o->gap = 0;
    if (!o->rows && !o->cols) {
        o->cols = (int)ceil(sqrt((double)n));
        if ((size_t)o->cols * (size_t)(o->cols - 1) >= n) o->rows = o->cols - 1;
        else o->rows = o->cols;
    } else if (!o->rows) {
        o->rows = (int)((n + (size_t)o->cols - 1) / (size_t)o->cols);
    } else if (!o->cols) {
        o->cols = (int)((n + (size_t)o->rows - 1) / (size_t)o->rows);
    }
    if ((size_t)o->rows * (size_t)o->cols < n)
        return nf_error(NF_EINVAL, "image grid: %d x %d cells cannot hold %zu images", o->rows, o->cols, n);
    /* the largest scale that keeps the picture within cairo's limit */
    long fit_w = ((long)GRID_MAX_SIDE - o->gap * (long)(o->cols + 1)) / ((long)o->cols * w);
    long fit_h = ((long)GRID_MAX_SIDE - o->gap * (long)(o->rows + 1)) / ((long)o->rows * h);
    long fit = fit_w < fit_h ? fit_w : fit_h;
    if (!o->scale) {
        int side = h < w ? h : w;
        o->scale = (NF_IMAGE_GRID_MIN_PX + side - 1) / side;
        if (o->scale > fit) o->scale = (int)fit;
    }
    if (o->scale < 1 || o->scale > fit)
        return nf_error(NF_EINVAL, "image grid: %d x %d images of %d x %d pixels at scale %d do not fit in %d pixels "
                        "on a side", o->rows, o->cols, h, w, o->scale ? o->scale : 1, GRID_MAX_SIDE);
    return NF_OK;
}

int nf_image_grid_write_png(const char *path, const nf_image_grid *grid, const nf_real *x, size_t n)
{
    if (!path || !*path) return nf_error(NF_EINVAL, "image grid: the output path is empty");
    if (!grid) return nf_error(NF_EINVAL, "image grid %s: no image shape given", path);
    nf_image_grid o = *grid;
    int h = o.h, w = o.w, c = o.c, levels = o.levels;
    if (n == 0) return nf_error(NF_EINVAL, "image grid %s: no images to draw", path);
    if (c != 1 && c != 3)
        return nf_error(NF_EINVAL, "image grid %s: images of %d channels (expected 1, grey, or 3, RGB)", path, c);
    if (h < 1 || w < 1 || h > GRID_MAX_SIDE || w > GRID_MAX_SIDE)
        return nf_error(NF_EINVAL, "image grid %s: images of %d x %d pixels (expected 1..%d on a side)", path, h, w,
                        GRID_MAX_SIDE);
    if (levels < 2) return nf_error(NF_EINVAL, "image grid %s: %d grey levels (expected at least 2)", path, levels);
    NF_TRY(grid_layout(n, h, w, &o));
    int s = o.scale, g = o.gap;
    int W = o.cols * w * s + (o.cols + 1) * g, H = o.rows * h * s + (o.rows + 1) * g;
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return nf_error(NF_ENOMEM, "image grid %s: cairo could not create a %d x %d picture", path, W, H);
    }
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int y = 0; y < H; y++)
        for (int xx = 0; xx < W; xx++) *(uint32_t *)(data + (size_t)y * stride + 4 * (size_t)xx) = GRID_GAP_RGB;
    size_t d = (size_t)h * w * c;
    for (size_t r = 0; r < n; r++) {
        int top = g + (int)(r / (size_t)o.cols) * (h * s + g), left = g + (int)(r % (size_t)o.cols) * (w * s + g);
        const nf_real *im = x + r * d;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const nf_real *p = im + ((size_t)i * w + j) * c;
                uint32_t R = grey_byte(p[0], levels), G = c == 3 ? grey_byte(p[1], levels) : R,
                         B = c == 3 ? grey_byte(p[2], levels) : R;
                uint32_t px = 0xff000000u | R << 16 | G << 8 | B;
                for (int a = 0; a < s; a++) {
                    uint32_t *row = (uint32_t *)(data + (size_t)(top + i * s + a) * stride) + left + j * s;
                    for (int b = 0; b < s; b++) row[b] = px;
                }
            }
    }
    cairo_surface_mark_dirty(img);
    int rc = nf_plot_surface_save_png(img, path);
    cairo_surface_destroy(img);
    return rc;
}
