/* apps/commands.h - the nf subcommands, one file each (apps/cmd_<name>.c), and shared CLI helpers.
 *
 * Each command takes argc/argv starting at its own name (argv[0] = "fit"), prints results on stdout,
 * progress and errors on stderr, and returns the process exit status: 0 success, 1 failure (bad
 * input, I/O), 2 usage error.  Errors are printed once, as "nf CMD: message", by cli_fail(). */
#ifndef NF_APPS_COMMANDS_H
#define NF_APPS_COMMANDS_H

#include <stdio.h>

#include "core/h5.h"

int nf_cmd_data(int argc, char **argv);
int nf_cmd_fit(int argc, char **argv);
int nf_cmd_eval(int argc, char **argv);
int nf_cmd_logprob(int argc, char **argv);
int nf_cmd_sample(int argc, char **argv);
int nf_cmd_info(int argc, char **argv);
int nf_cmd_plot(int argc, char **argv);
int nf_cmd_tpp(int argc, char **argv);
int nf_cmd_image(int argc, char **argv);
int nf_cmd_video(int argc, char **argv);
int nf_cmd_causal(int argc, char **argv);

/* Event-sequence data (apps/data_tpp.c).  nf data make tpp-NAME (argv[0] "make", argv[1] the name);
 * its lines of nf data make --list; the importer behind nf tpp import and nf data import --sequences
 * (cmd names the command in messages; argv[0] is its name); whether a file is an nf-sequences file;
 * nf data split of one into path[0..2] (train, val, test), the arguments already checked. */
int app_data_make_tpp(int argc, char **argv);
int app_data_make_causal(int argc, char **argv);   /* apps/data_make_causal.c */
int app_data_make_dependent(int argc, char **argv); /* apps/data_make_dependent.c */
void app_data_list_causal(void);                    /* their lines of nf data make --list */
void app_data_list_dependent(void);
void app_data_list_tpp(void);
/* Image data (apps/data_images.c): nf data make shapes|digits (argv[0] "make", the name anywhere) and
 * their lines of --list; nf data import of a folder of PNG files or an image NPY (argv[0] "import"),
 * and whether an input is one (a folder, or an NPY of 3 or more dimensions); nf data show. */
int app_data_make_images(int argc, char **argv);
void app_data_list_images(void);
int app_is_image_input(const char *path);
int app_data_import_images(int argc, char **argv);
/* The default digits file (data/digits.csv.gz near the binary or in the current directory) into
 * buf; NULL and a message listing the places looked at when none holds it. */
const char *app_find_digits(char *buf, size_t size);
/* A generated or imported data file: write(f, set) its datasets, then the root attributes
 * generator, source (when not NULL), seed (when >= 0), n, dim and density "unknown"; atomic. */
int app_data_save(const char *out, int (*write)(nf_h5 *f, const void *set), const void *set, size_t n, size_t dim,
                  const char *generator, const char *source, long seed);
/* ", K classes (a 10, b 12, ...)" of a data summary line: the counts of the first ten labels'
 * classes; nothing without labels. */
void app_print_classes(const int64_t *labels, size_t n, int n_classes, char *const *names);
int app_data_show(int argc, char **argv);
/* Video data (apps/data_videos.c): nf data make video-sprites|video-balls (argv[0] "make", the name
 * anywhere) and whether a word is one of their names; their lines of --list; nf data import of a
 * video NPY (argv[0] "import"; rank 5, or rank 4 with --video) and whether an input is a rank-5 NPY;
 * nf data show of a video file (PNG filmstrip or animated GIF), whether a path is a video file
 * (/x with video_shape) and whether nf data show's arguments name one. */
int app_data_make_videos(int argc, char **argv);
int app_is_video_name(const char *s);
void app_data_list_videos(void);
int app_is_video_input(const char *path);
int app_data_import_videos(int argc, char **argv);
int app_is_video_file(const char *path);
int app_data_show_is_video(int argc, char **argv);
int app_data_show_video(int argc, char **argv);
int app_tpp_import(const char *cmd, int argc, char **argv);
int app_is_sequences_file(const char *path);
int app_data_split_sequences(const char *cmd, const char *in, const char *const path[3], double val, double test,
                             long seed);
/* nf tpp eval's lines (or JSON fields, after the others) for data that carry the truth: the true NLL
 * per event and per sequence in both conventions and the gap model - truth with its standard error
 * over sequences, given the model's per-sequence log-likelihoods with and without the survival term
 * (s->n each).  Nothing for data without truth. */
struct nf_source;
void app_tpp_print_truth(const struct nf_source *s, const double *with, const double *without, size_t events,
                         int json);

/* Print "nf CMD: <last library error>" (or the formatted message) on stderr; return 1. */
int cli_fail(const char *cmd);
int cli_failf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: "nf CMD: message" plus "run 'nf CMD --help' for the options"; return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict number parsing for flag values; on error print a usage error naming the flag. */
int cli_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* 1 if argv[i] is -h or --help. */
int cli_is_help(const char *s);
/* --threads N of the commands that compute: OpenMP and BLAS threads (threads <= 0: all cores). */
void cli_set_threads(int threads);

#endif
