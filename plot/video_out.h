/* plot/video_out.h - videos as pictures: an animated GIF (giflib) and a PNG filmstrip.
 *
 * A video is T frames of h x w x c, frame-major, each frame NHWC (datasets/videos.h), as grey
 * levels 0..levels-1 (a model's samples are real numbers: they are rounded and clamped to that
 * range) and drawn as round(v * 255 / (levels - 1)) grey.  Colour (c = 3) is drawn as its luma
 * 0.299 R + 0.587 G + 0.114 B in the GIF (one 256-grey palette) and in colour in the PNG; other
 * channel counts are refused.  Every image pixel is drawn as a scale x scale block.  Both files are
 * written atomically (a temporary file in the same directory renamed into place; nothing is left
 * behind on error), and the same inputs give the same bytes.
 *
 *   nf_video_gif_write("v.gif", x, 16, 32, 32, 1, 256, 4, 10);          // video 0, 10 fps, 4x
 *   nf_video_filmstrip_png("s.png", x, 8, 16, 32, 32, 1, 256, 2);        // 8 videos, one a row
 */
#ifndef NF_PLOT_VIDEO_OUT_H
#define NF_PLOT_VIDEO_OUT_H

#include "core/error.h"

#define NF_VIDEO_GIF_GAP_GREY 64     /* the gap between the videos of a GIF grid */
#define NF_VIDEO_GIF_MAX_SIDE 65535  /* GIF's limit on a picture's side */

/* One video `frames` (T, h*w*c) as an animated GIF that loops forever (NETSCAPE2.0), one frame
 * every delay_cs hundredths of a second (0..65535), a global palette of 256 greys.  NF_EINVAL
 * naming what is wrong; NF_EIO if the file cannot be written (path then untouched). */
int nf_video_gif_write(const char *path, const nf_real *frames, int T, int h, int w, int c, int levels, int scale,
                       int delay_cs);
/* n videos (n, T*h*w*c) played side by side in one GIF: a grid of cols columns (0: about square),
 * filled row by row, with a gap of 2 pixels of NF_VIDEO_GIF_GAP_GREY between the videos and around
 * them (none for n = 1, so nf_video_gif_write is this with n = 1). */
int nf_video_gif_write_grid(const char *path, const nf_real *videos, int n, int cols, int T, int h, int w, int c,
                            int levels, int scale, int delay_cs);

/* n videos (n, T*h*w*c) as a PNG: one row a video, its T frames left to right, with a 2 pixel
 * dark-grey gap between the frames and around them (plot/image_grid.h with rows n and cols T). */
int nf_video_filmstrip_png(const char *path, const nf_real *videos, int n, int T, int h, int w, int c, int levels,
                           int scale);

#endif
