/* datasets/videos.h - video data: the video attributes of a data file, the video-sprites and
 * video-balls generators, and NPY arrays brought in as videos.
 *
 * A video data file is an ordinary nf data file (docs/FORMATS.md, "Video data"), so nf fit reads it
 * as rows.  Video r of T frames of height h, width w and c channels is row r of /x, T*h*w*c values,
 * frame-major: frame t starts at offset t*h*w*c, and inside a frame the layout is the image layout
 * of datasets/images.h (NHWC: pixel (i, j) channel k at (i*w + j)*c + k).  So the n x T frames of a
 * video set are also an (n*T, h*w*c) array of images.  Values are integer grey levels
 * 0..levels-1 (float64 on disk).  /x carries the attributes `video_shape` (int64[4] = T, h, w, c)
 * and `levels` (int64); never image_shape (a video file is not an image file).  Class labels, when
 * there are any, are stored exactly as for images: /labels (n,) int64, /class_names (K,), and the
 * one-hot /context (n, K) named "class=<name>" in /context_names.
 *
 *   nf_video_set s;
 *   nf_video_balls(&s, 2000, 16, 32, seed);        // or nf_video_sprites, nf_video_import_npy
 *   nf_h5_create(&f, "balls.h5", "nf-data", 1);
 *   nf_video_set_write(f, &s);                      // /x with its attributes, the labels
 *   ... root attributes ..., nf_h5_commit(f);
 *   nf_video_set_free(&s);
 *
 * Motion in the generators is the exact motion of a point in a reflecting box: a coordinate p that
 * must stay in [lo, hi] and starts at p0 with velocity v is, at frame t,
 *     u = (p0 - lo + v t) mod 2L,  L = hi - lo,   p(t) = lo + (u <= L ? u : 2L - u)
 * (the triangle wave: elastic bounces off both walls, speed kept).  The parameters of all videos
 * are drawn first, in order, from one stream; the frames are then drawn in parallel, each video from
 * its own parameters only, so a seed gives the same videos whatever the thread count.
 */
#ifndef NF_DATASETS_VIDEOS_H
#define NF_DATASETS_VIDEOS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/h5.h"
#include "datasets/images.h"

#define NF_VIDEO_MAX_FRAMES 4096
#define NF_VIDEO_MAX_SIDE NF_IMAGE_MAX_SIDE
#define NF_VIDEO_MAX_LEVELS NF_IMAGE_MAX_LEVELS
#define NF_VIDEO_MAX_CLASSES NF_IMAGE_MAX_CLASSES
#define NF_VIDEO_GEN_MAX_N 10000000  /* videos a generator draws at most */

/* The generators' defaults (nf data make video-sprites|video-balls). */
#define NF_VIDEO_DEFAULT_FRAMES 16
#define NF_VIDEO_DEFAULT_SIZE 32
#define NF_VIDEO_GEN_MIN_SIZE 16
#define NF_VIDEO_GEN_MAX_SIZE 256
#define NF_VIDEO_SPRITE_SCALE 2      /* an 8 x 8 digit drawn as 16 x 16 */
#define NF_VIDEO_SPRITE_MIN_SIZE 20  /* frame side: room for a 16 x 16 sprite to move */

typedef struct nf_video_info {
    int frames, h, w, c;             /* frames T, height, width, channels (1 grey, 3 RGB) */
    int levels;                      /* values are integers 0..levels-1 */
    int n_classes;                   /* 0 without labels */
} nf_video_info;

/* A set of n videos in memory with their labels. */
typedef struct nf_video_set {
    nf_video_info info;
    size_t n;
    double *x;                       /* (n, T*h*w*c) grey levels, frame-major */
    int64_t *labels;                 /* (n) in 0..n_classes-1, or NULL */
    char **class_names;              /* (n_classes) names, or NULL */
} nf_video_set;

void nf_video_set_free(nf_video_set *s);   /* NULL-safe; zeroes the struct */
/* frames*h*w*c, the width of a row; nf_video_frame_dim: h*w*c, one frame. */
size_t nf_video_info_dim(const nf_video_info *info);
size_t nf_video_frame_dim(const nf_video_info *info);

/* NF_OK if every value of x (n videos of info's shape) is an integer in 0..levels-1; otherwise
 * NF_EDATA naming `what`, the video, the frame, the pixel and the value. */
int nf_video_check_values(const char *what, const nf_video_info *info, const double *x, size_t n);

/* Write /x (n, T*h*w*c) float64 with its attributes video_shape and levels; with labels also
 * /labels, /class_names, and the one-hot /context with /context_names "class=<name>". */
int nf_video_set_write(nf_h5 *f, const nf_video_set *s);
/* Only the attributes on /x (video_shape and levels). */
int nf_video_attrs_write(nf_h5 *f, const nf_video_info *info);
/* 1 if the open file's /x carries video_shape (a video file), else 0; never an error. */
int nf_video_file_is(nf_h5 *f);
/* The video attributes of an open file's /x (n rows of d columns; d must be T*h*w*c) and the
 * classes of /labels and /class_names.  NF_EFORMAT naming the file and what was expected. */
int nf_video_info_read_h5(nf_h5 *f, size_t n, size_t d, nf_video_info *info);
/* The same from a path: checks that /x exists and is 2-D, its width is T*h*w*c and the attributes
 * are sane (T 1..NF_VIDEO_MAX_FRAMES, sides 1..NF_VIDEO_MAX_SIDE, 1..4 channels, 2..65536
 * levels); *n (may be NULL) receives the number of videos. */
int nf_video_info_read(const char *path, nf_video_info *info, size_t *n);
/* The whole video file: rows, attributes, labels; values checked as nf_video_check_values. */
int nf_video_set_load(const char *path, nf_video_set *s);

/* "video-sprites": n videos of `frames` frames of size x size grey pixels (size 20..256), each one
 * handwritten digit drawn from `digits` (an image set of 8 x 8 digits with 17 levels, such as
 * nf_image_digits gives) uniformly, scaled 2x (nearest neighbour) to a 16 x 16 sprite on a black
 * background, whose top-left corner moves with a constant integer velocity (vx, vy), each
 * component uniform in {-3, -2, -1, 1, 2, 3} pixels a frame, and bounces off the walls of the frame
 * (the reflecting box above with lo = 0, hi = size - 16, positions integers, so the sprite's
 * pixels stay exact grey levels).  17 levels; label = the digit's class (class names "0".."9",
 * or the digits' own). */
int nf_video_sprites(nf_video_set *s, const nf_image_set *digits, size_t n, int frames, int size, uint64_t seed);

/* "video-balls": n videos of `frames` frames of size x size grey pixels (size 16..256), each with
 * one or two white discs (radius uniform in [0.08, 0.14] size) on black, the centre of each moving
 * with a constant real velocity (speed uniform in [1, 2.5] pixels a frame, direction uniform) and
 * bouncing off the walls (the reflecting box with lo = r, hi = size - r, so a disc always lies
 * wholly inside the frame).  Discs pass through each other (no collisions between them); where
 * they overlap the coverages add and clamp at white.  Anti-aliased by 4 x 4 sampling of each
 * pixel, 256 levels.  Label = the number of discs: class 0 "1" (one disc), class 1 "2" (two). */
int nf_video_balls(nf_video_set *s, size_t n, int frames, int size, uint64_t seed);

/* An NPY video array of any integer or real type whose values are integers in 0..levels-1
 * (levels 0 means 256): rank 5 (n, T, H, W, C), or rank 4 (n, T, H, W) one channel.  labels (may
 * be NULL) an NPY of n integers 0..K-1, whose classes are named by their numbers. */
int nf_video_import_npy(nf_video_set *s, const char *path, const char *labels, int levels);

#endif
