/* tests/cli/pngstat.c - PNG facts for the plot tests, read with cairo.
 *   pngstat A.png                        prints "WIDTH HEIGHT"
 *   pngstat A.png B.png X0 Y0 X1 Y1      prints the fraction of pixels in [X0,X1) x [Y0,Y1) that differ */
#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>

static cairo_surface_t *load(const char *path)
{
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "pngstat: %s: %s\n", path, cairo_status_to_string(cairo_surface_status(s)));
        exit(2);
    }
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 7) {
        fprintf(stderr, "usage: pngstat A.png [B.png X0 Y0 X1 Y1]\n");
        return 2;
    }
    cairo_surface_t *a = load(argv[1]);
    int w = cairo_image_surface_get_width(a), h = cairo_image_surface_get_height(a);
    if (argc == 2) {
        printf("%d %d\n", w, h);
        cairo_surface_destroy(a);
        return 0;
    }
    cairo_surface_t *b = load(argv[2]);
    if (cairo_image_surface_get_width(b) != w || cairo_image_surface_get_height(b) != h) {
        printf("1\n");
        return 0;
    }
    int x0 = atoi(argv[3]), y0 = atoi(argv[4]), x1 = atoi(argv[5]), y1 = atoi(argv[6]);
    const unsigned char *pa = cairo_image_surface_get_data(a), *pb = cairo_image_surface_get_data(b);
    int stride = cairo_image_surface_get_stride(a);
    long diff = 0, total = 0;
    for (int y = y0; y < y1 && y < h; y++)
        for (int x = x0; x < x1 && x < w; x++) {
            const unsigned *qa = (const unsigned *)(pa + (size_t)y * stride) + x;
            const unsigned *qb = (const unsigned *)(pb + (size_t)y * stride) + x;
            diff += *qa != *qb;
            total++;
        }
    printf("%.4f\n", total ? (double)diff / total : 0.0);
    cairo_surface_destroy(a);
    cairo_surface_destroy(b);
    return 0;
}
