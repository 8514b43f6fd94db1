/* tests/cli/pngstat.c - PNG facts for the plot tests, read with cairo.
 *   pngstat A.png                        prints "WIDTH HEIGHT"
 *   pngstat A.png B.png X0 Y0 X1 Y1      prints the fraction of pixels in [X0,X1) x [Y0,Y1) that differ
 *   pngstat corr A.png X0 Y0 X1 Y1 U0 V0 U1 V1
 *                                        finds the plot area in each of the two rectangles (the first
 *                                        run of columns, and then of rows, that are mostly coloured:
 *                                        a heat map or 2-D histogram, not its white margins, grey text
 *                                        or the colour bar beyond a white gap), cuts both into 10 x 10
 *                                        blocks and prints the correlation of the blocks' mean
 *                                        luminance (viridis' luminance grows with the value shown) */
#include <cairo.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static cairo_surface_t *load(const char *path)
{
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "pngstat: %s: %s\n", path, cairo_status_to_string(cairo_surface_status(s)));
        exit(2);
    }
    return s;
}

/* Colour (not white, grey or black): the spread of its channels. */
static int coloured(unsigned px) { int r = px >> 16 & 255, g = px >> 8 & 255, b = px & 255;
    int hi = r > g ? (r > b ? r : b) : (g > b ? g : b), lo = r < g ? (r < b ? r : b) : (g < b ? g : b);
    return hi - lo > 40; }
static double lum(unsigned px) { return 0.299 * (px >> 16 & 255) + 0.587 * (px >> 8 & 255) + 0.114 * (px & 255); }

#define K 10
/* Block means (K x K) of the plot area inside [x0,x1) x [y0,y1); 0 if none is found. */
static int blocks(cairo_surface_t *s, int x0, int y0, int x1, int y1, double *out)
{
    const unsigned char *d = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s);
#define PX(x, y) (*((const unsigned *)(d + (size_t)(y) * stride) + (x)))
    int ax = -1, bx = -1, ay = -1, by = -1;
    for (int x = x0; x < x1; x++) { /* the first run of mostly coloured columns */
        int c = 0;
        for (int y = y0; y < y1; y++) c += coloured(PX(x, y));
        if (2 * c > y1 - y0) { if (ax < 0) ax = x; bx = x + 1; } else if (ax >= 0) break;
    }
    if (ax < 0) return 0;
    for (int y = y0; y < y1; y++) {
        int c = 0;
        for (int x = ax; x < bx; x++) c += coloured(PX(x, y));
        if (2 * c > bx - ax) { if (ay < 0) ay = y; by = y + 1; } else if (ay >= 0) break;
    }
    if (ay < 0 || bx - ax < K || by - ay < K) return 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            int u0 = ax + (bx - ax) * j / K, u1 = ax + (bx - ax) * (j + 1) / K;
            int v0 = ay + (by - ay) * i / K, v1 = ay + (by - ay) * (i + 1) / K;
            double sum = 0;
            for (int y = v0; y < v1; y++)
                for (int x = u0; x < u1; x++) sum += lum(PX(x, y));
            out[i * K + j] = sum / ((double)(u1 - u0) * (v1 - v0));
        }
#undef PX
    return 1;
}

static int corr_main(char **argv)
{
    cairo_surface_t *a = load(argv[2]);
    double p[K * K], q[K * K];
    if (!blocks(a, atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), p) ||
        !blocks(a, atoi(argv[7]), atoi(argv[8]), atoi(argv[9]), atoi(argv[10]), q)) {
        fprintf(stderr, "pngstat: no plot area found\n");
        return 2;
    }
    double mp = 0, mq = 0, spp = 0, sqq = 0, spq = 0;
    for (int k = 0; k < K * K; k++) mp += p[k] / (K * K), mq += q[k] / (K * K);
    for (int k = 0; k < K * K; k++)
        spp += (p[k] - mp) * (p[k] - mp), sqq += (q[k] - mq) * (q[k] - mq), spq += (p[k] - mp) * (q[k] - mq);
    printf("%.4f\n", spp > 0 && sqq > 0 ? spq / sqrt(spp * sqq) : 0.0);
    cairo_surface_destroy(a);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 11 && !strcmp(argv[1], "corr")) return corr_main(argv);
    if (argc != 2 && argc != 7) {
        fprintf(stderr, "usage: pngstat A.png [B.png X0 Y0 X1 Y1] | pngstat corr A.png X0 Y0 X1 Y1 U0 V0 U1 V1\n");
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
