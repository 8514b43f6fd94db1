/* plot/video_out.c - animated GIFs (giflib) and PNG filmstrips of videos (plot/video_out.h).
 *
 * The GIF: a GIF89a logical screen of the whole grid with a global palette of 256 greys (entry g
 * is (g, g, g)), the NETSCAPE2.0 application extension with loop count 0 (forever), then per frame
 * a graphics control extension (the delay, no transparency) and a full-screen image of palette
 * indices.  Written through our own FILE (EGifOpen with an output function) to a temporary
 * "<path>.tmp<pid>.<k>" opened O_EXCL, flushed, fsync'ed and renamed over path.
 */
#include "plot/video_out.h"

#include <errno.h>
#include <fcntl.h>
#include <gif_lib.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plot/image_grid.h"

#define GIF_GAP 2

/* A value of 0..levels-1 (rounded, clamped) as 0..255. */
static int grey_byte(double v, int levels)
{
    double top = levels - 1;
    if (!(v > 0)) v = 0; /* NaN too */
    if (v > top) v = top;
    return (int)lround(round(v) * 255.0 / top);
}

/* Pixel p (c values) as one grey byte: itself, or the luma of R, G, B. */
static GifPixelType pixel_grey(const nf_real *p, int c, int levels)
{
    if (c == 1) return (GifPixelType)grey_byte(p[0], levels);
    double y = 0.299 * grey_byte(p[0], levels) + 0.587 * grey_byte(p[1], levels) + 0.114 * grey_byte(p[2], levels);
    return (GifPixelType)lround(y);
}

static int check_video_args(const char *what, const char *path, int n, int T, int h, int w, int c, int levels,
                            int scale)
{
    if (!path || !*path) return nf_error(NF_EINVAL, "%s: the output path is empty", what);
    if (n < 1 || T < 1) return nf_error(NF_EINVAL, "%s %s: %d videos of %d frames (expected at least one of each)",
                                        what, path, n, T);
    if (h < 1 || w < 1) return nf_error(NF_EINVAL, "%s %s: frames of %d x %d pixels (expected >= 1)", what, path, h, w);
    if (c != 1 && c != 3)
        return nf_error(NF_EINVAL, "%s %s: frames of %d channels (expected 1, grey, or 3, RGB)", what, path, c);
    if (levels < 2) return nf_error(NF_EINVAL, "%s %s: %d grey levels (expected at least 2)", what, path, levels);
    if (scale < 1) return nf_error(NF_EINVAL, "%s %s: scale %d (expected 1 or more)", what, path, scale);
    return NF_OK;
}

/* ---- GIF ------------------------------------------------------------------------------------- */

static int gif_out(GifFileType *g, const GifByteType *buf, int len)
{
    return (int)fwrite(buf, 1, (size_t)len, (FILE *)g->UserData);
}

/* The grid's frame t into screen (W x H palette indices). */
static void gif_compose(GifPixelType *screen, int W, int H, const nf_real *videos, int n, int cols, int t, int T,
                        int h, int w, int c, int levels, int s, int gap)
{
    memset(screen, NF_VIDEO_GIF_GAP_GREY, (size_t)W * H);
    size_t fd = (size_t)h * w * c, vd = (size_t)T * fd;
    for (int r = 0; r < n; r++) {
        int top = gap + (r / cols) * (h * s + gap), left = gap + (r % cols) * (w * s + gap);
        const nf_real *f = videos + (size_t)r * vd + (size_t)t * fd;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                GifPixelType g = pixel_grey(f + ((size_t)i * w + j) * c, c, levels);
                for (int a = 0; a < s; a++) memset(screen + (size_t)(top + i * s + a) * W + left + j * s, g, (size_t)s);
            }
    }
}

/* Screen descriptor with the grey palette, the loop extension, then every frame. */
static int gif_body(GifFileType *g, const nf_real *videos, int n, int cols, int T, int h, int w, int c, int levels,
                    int s, int gap, int W, int H, int delay_cs)
{
    ColorMapObject *cmap = GifMakeMapObject(256, NULL);
    GifPixelType *screen = malloc((size_t)W * H);
    int ok = cmap && screen;
    for (int i = 0; ok && i < 256; i++) cmap->Colors[i] = (GifColorType){(GifByteType)i, (GifByteType)i, (GifByteType)i};
    EGifSetGifVersion(g, true);
    ok = ok && EGifPutScreenDesc(g, W, H, 8, 0, cmap) == GIF_OK;
    static const unsigned char loop[3] = {1, 0, 0}; /* sub-block 1: loop count 0, forever */
    ok = ok && EGifPutExtensionLeader(g, APPLICATION_EXT_FUNC_CODE) == GIF_OK &&
         EGifPutExtensionBlock(g, 11, "NETSCAPE2.0") == GIF_OK && EGifPutExtensionBlock(g, 3, loop) == GIF_OK &&
         EGifPutExtensionTrailer(g) == GIF_OK;
    GraphicsControlBlock gcb = {.DisposalMode = DISPOSE_DO_NOT, .UserInputFlag = false, .DelayTime = delay_cs,
                                .TransparentColor = NO_TRANSPARENT_COLOR};
    GifByteType ext[4];
    size_t elen = EGifGCBToExtension(&gcb, ext);
    for (int t = 0; ok && t < T; t++) {
        gif_compose(screen, W, H, videos, n, cols, t, T, h, w, c, levels, s, gap);
        ok = EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, (int)elen, ext) == GIF_OK &&
             EGifPutImageDesc(g, 0, 0, W, H, false, NULL) == GIF_OK;
        for (int y = 0; ok && y < H; y++) ok = EGifPutLine(g, screen + (size_t)y * W, W) == GIF_OK;
    }
    int rc = ok ? NF_OK : !cmap || !screen ? NF_ENOMEM : NF_EIO;
    GifFreeMapObject(cmap);
    free(screen);
    return rc;
}

/* A new temporary file next to path, opened for writing; NULL (errno set) when none can be made. */
static FILE *tmp_open(const char *path, char *tmp, size_t cap)
{
    int fd = -1;
    for (int k = 0; k < 64 && fd < 0; k++) {
        snprintf(tmp, cap, "%s.tmp%ld.%d", path, (long)getpid(), k);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) return NULL;
    }
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd), unlink(tmp);
        errno = e;
    }
    return f;
}

int nf_video_gif_write_grid(const char *path, const nf_real *videos, int n, int cols, int T, int h, int w, int c,
                            int levels, int scale, int delay_cs)
{
    NF_TRY(check_video_args("GIF", path, n, T, h, w, c, levels, scale));
    if (delay_cs < 0 || delay_cs > 65535)
        return nf_error(NF_EINVAL, "GIF %s: delay %d hundredths of a second (expected 0..65535)", path, delay_cs);
    if (cols < 0) return nf_error(NF_EINVAL, "GIF %s: %d columns (expected 0, about square, or more)", path, cols);
    if (cols == 0) cols = (int)ceil(sqrt((double)n));
    if (cols > n) cols = n;
    int rows = (n + cols - 1) / cols, gap = n > 1 ? GIF_GAP : 0;
    double Wd = (double)cols * w * scale + (cols + 1.0) * gap, Hd = (double)rows * h * scale + (rows + 1.0) * gap;
    if (Wd > NF_VIDEO_GIF_MAX_SIDE || Hd > NF_VIDEO_GIF_MAX_SIDE)
        return nf_error(NF_EINVAL, "GIF %s: %d x %d videos of %d x %d at scale %d make %.0f x %.0f pixels (expected at "
                        "most %d a side)", path, rows, cols, h, w, scale, Hd, Wd, NF_VIDEO_GIF_MAX_SIDE);
    size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    if (!tmp) return nf_error(NF_ENOMEM, "GIF %s: out of memory", path);
    FILE *f = tmp_open(path, tmp, cap);
    if (!f) {
        int e = errno;
        free(tmp);
        return nf_error(NF_EIO, "cannot write GIF '%s': %s", path, strerror(e));
    }
    int gerr = 0;
    GifFileType *g = EGifOpen(f, gif_out, &gerr);
    int rc = g ? gif_body(g, videos, n, cols, T, h, w, c, levels, scale, gap, (int)Wd, (int)Hd, delay_cs) : NF_ENOMEM;
    int e = rc == NF_EIO && ferror(f) ? errno : 0;
    if (g && EGifCloseFile(g, &gerr) != GIF_OK && rc == NF_OK) rc = NF_EIO;
    if (rc == NF_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0)) rc = NF_EIO, e = errno;
    if (fclose(f) != 0 && rc == NF_OK) rc = NF_EIO, e = errno;
    if (rc == NF_OK && rename(tmp, path) != 0) rc = NF_EIO, e = errno;
    if (rc != NF_OK) {
        unlink(tmp);
        if (rc == NF_ENOMEM) nf_error(rc, "GIF %s: out of memory", path);
        else nf_error(rc, "cannot write GIF '%s': %s", path, e ? strerror(e) : GifErrorString(gerr));
    }
    free(tmp);
    return rc;
}

int nf_video_gif_write(const char *path, const nf_real *frames, int T, int h, int w, int c, int levels, int scale,
                       int delay_cs)
{
    return nf_video_gif_write_grid(path, frames, 1, 1, T, h, w, c, levels, scale, delay_cs);
}

/* ---- filmstrip ------------------------------------------------------------------------------- */

int nf_video_filmstrip_png(const char *path, const nf_real *videos, int n, int T, int h, int w, int c, int levels,
                           int scale)
{
    NF_TRY(check_video_args("filmstrip", path, n, T, h, w, c, levels, scale));
    /* n videos of T frames are n*T images in order: a grid of n rows and T columns */
    nf_image_grid g = {.h = h, .w = w, .c = c, .levels = levels, .rows = n, .cols = T, .scale = scale, .gap = 2};
    return nf_image_grid_write_png(path, &g, videos, (size_t)n * (size_t)T);
}
