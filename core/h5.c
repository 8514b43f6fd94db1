/* core/h5.c - HDF5 files the nf way: atomic writes, format stamps, converting reads.
 *
 * A writer works on "<path>.tmp.<pid>" and only nf_h5_commit() renames it over <path> (after an
 * fsync), so the file at <path> is always either the old one or the complete new one.  Every HDF5
 * call's failure becomes an NF_E* code with a message naming the file and the object; HDF5's own
 * error stack printing is switched off once, before the first call.
 *
 * Corruption is detected, not computed with: files are written in the HDF5 1.10 format (object
 * headers, superblock and chunk indexes carry checksums), every non-empty dataset is chunked with
 * the Fletcher32 checksum filter, and strings are fixed-length (no global heap, whose damage
 * crashes libhdf5 1.10).  Readers still take variable-length strings and unfiltered datasets
 * (older nf files, h5py), and check a dataset's stored size against its declared shape before
 * allocating for it.
 */
#ifdef __linux__
#define _GNU_SOURCE /* memfd_create */
#endif
#include "core/h5.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#endif

#define OBJ_MAX 1024 /* longest object path we accept */
#ifndef CHUNK_BYTES
#define CHUNK_BYTES 16384 /* target chunk size: small enough for --stream's scattered row reads */
#endif
#define CORE_INCREMENT (1 << 16) /* a writer's in-memory file grows by this much at a time */

struct nf_h5 {
    hid_t fid;
    char *path;    /* final path, used in every message */
    char *tmp;     /* temporary path while writing; NULL when opened for reading */
    int version;   /* format_version stamped or read (0 if none) */
};

static void h5_init(void)
{
    static int done = 0;
    if (done) return;
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* File access: close every object with the file, and tolerate file systems without locks.  A
 * writer uses the 1.10 file format, whose metadata (superblock, object headers, chunk indexes)
 * carries checksums; such files need HDF5 1.10 or newer to read.  A writer also builds the file in
 * memory (HDF5's core driver, written to the temporary file when flushed at commit): a write that
 * fails there, on a full disk, leaves HDF5's metadata cache intact, where a failed flush of the
 * default driver leaves a file that can no longer be closed.  The memory is the file's size. */
static hid_t make_fapl(int writing)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return fapl;
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, 1, 1);
#endif
    if (writing) H5Pset_fapl_core(fapl, CORE_INCREMENT, 1);
#if H5_VERSION_GE(1, 10, 2)
    if (writing) H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
#else
    if (writing) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
#endif
    return fapl;
}

static void h5_free(nf_h5 *f)
{
    free(f->path);
    free(f->tmp);
    free(f);
}

const char *nf_h5_path(const nf_h5 *f) { return f->path; }
int nf_h5_format_version(const nf_h5 *f) { return f->version; }

static int check_obj(const nf_h5 *f, const char *obj)
{
    if (!obj || obj[0] != '/')
        return nf_error(NF_EINVAL, "%s: object path '%s' is not absolute (expected \"/name\")", f->path,
                        obj ? obj : "(null)");
    if (strlen(obj) >= OBJ_MAX)
        return nf_error(NF_EINVAL, "%s: object path '%.40s...' is longer than %d characters", f->path, obj,
                        OBJ_MAX - 1);
    return NF_OK;
}

static int check_writable(const nf_h5 *f, const char *obj)
{
    NF_TRY(check_obj(f, obj));
    if (!f->tmp) return nf_error(NF_EINVAL, "%s: cannot write %s: the file was opened for reading", f->path, obj);
    return NF_OK;
}

/* 1 if the object exists: every prefix is tested, because HDF5 fails on a missing parent. */
static int obj_exists(hid_t fid, const char *obj)
{
    if (strcmp(obj, "/") == 0) return 1;
    char buf[OBJ_MAX];
    snprintf(buf, sizeof buf, "%s", obj);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int e = H5Lexists(fid, buf, H5P_DEFAULT) > 0;
        *p = '/';
        if (!e) return 0;
    }
    return H5Lexists(fid, buf, H5P_DEFAULT) > 0 && H5Oexists_by_name(fid, buf, H5P_DEFAULT) > 0;
}

/* H5I_GROUP, H5I_DATASET, ... or H5I_BADID if absent. */
static H5I_type_t obj_kind(hid_t fid, const char *obj)
{
    if (!obj_exists(fid, obj)) return H5I_BADID;
    hid_t o = H5Oopen(fid, obj, H5P_DEFAULT);
    if (o < 0) return H5I_BADID;
    H5I_type_t t = H5Iget_type(o);
    H5Oclose(o);
    return t;
}

int nf_h5_exists(nf_h5 *f, const char *obj)
{
    if (!obj || obj[0] != '/' || strlen(obj) >= OBJ_MAX) return 0;
    return obj_exists(f->fid, obj);
}

int nf_h5_group(nf_h5 *f, const char *path)
{
    NF_TRY(check_writable(f, path));
    char buf[OBJ_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    size_t len = strlen(buf);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        if (buf[i - 1] == '/') continue; /* "//" or a trailing slash */
        char c = buf[i];
        buf[i] = '\0';
        H5I_type_t k = obj_kind(f->fid, buf);
        if (k == H5I_BADID) {
            hid_t g = H5Gcreate2(f->fid, buf, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (g < 0) return nf_error(NF_EIO, "%s: cannot create group %s", f->path, buf);
            H5Gclose(g);
        } else if (k != H5I_GROUP) {
            return nf_error(NF_EINVAL, "%s: cannot create group %s: %s exists and is not a group", f->path, path,
                            buf);
        }
        buf[i] = c;
    }
    return NF_OK;
}

/* ---- creating and opening ---------------------------------------------------------------------- */

int nf_h5_create(nf_h5 **out, const char *path, const char *format, int version)
{
    *out = NULL;
    h5_init();
    nf_h5 *f = nf_calloc(1, sizeof *f, "an HDF5 file handle");
    if (!f) return NF_ENOMEM;
    size_t tl = strlen(path) + 32;
    f->path = dup_str(path);
    f->tmp = malloc(tl);
    if (!f->path || !f->tmp) {
        h5_free(f);
        return nf_error(NF_ENOMEM, "%s: out of memory opening the file", path);
    }
    snprintf(f->tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    f->version = format ? version : 0;

    /* stdio first: it tells us why a directory is unwritable, HDF5 does not. */
    FILE *probe = fopen(f->tmp, "wb");
    if (!probe) {
        int rc = nf_error(NF_EIO, "%s: cannot write (%s)", path, strerror(errno));
        h5_free(f);
        return rc;
    }
    fclose(probe);
    hid_t fapl = make_fapl(1);
    f->fid = H5Fcreate(f->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f->fid < 0) {
        remove(f->tmp);
        int rc = nf_error(NF_EIO, "%s: cannot create an HDF5 file at %s", path, f->tmp);
        h5_free(f);
        return rc;
    }
    int rc = nf_h5_attr_set_string(f, "/", "nf_version", NF_VERSION);
    if (rc == NF_OK && format) rc = nf_h5_attr_set_string(f, "/", "format", format);
    if (rc == NF_OK && format) rc = nf_h5_attr_set_int64(f, "/", "format_version", version);
    if (rc != NF_OK) {
        nf_h5_abort(f);
        return rc;
    }
    *out = f;
    return NF_OK;
}

/* The descriptors HDF5 holds on the temporary file of a writer that failed or is thrown away are
 * pointed at an anonymous in-memory file: HDF5 still writes the file out when it is closed, and if
 * that fails too (a full disk) HDF5 1.10 keeps a half-destroyed file that crashes its exit handler
 * (H5F__close_cb).  The last writes succeed there and vanish; the temporary file is removed
 * anyway.  The descriptors are found by the file's device and inode (Linux: /proc/self/fd). */
static void divert_writes(const nf_h5 *f)
{
#ifdef __linux__
    struct stat want, have;
    if (!f->tmp || stat(f->tmp, &want) != 0) return;
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) return;
    int skip = dirfd(dir);
    struct dirent *e;
    while ((e = readdir(dir))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == skip || fstat((int)fd, &have) != 0) continue;
        if (have.st_dev != want.st_dev || have.st_ino != want.st_ino) continue;
        int sink = memfd_create("nf-discarded", 0);
        if (sink < 0) sink = open("/dev/null", O_WRONLY);
        if (sink < 0) break;
        dup2(sink, (int)fd);
        close(sink);
    }
    closedir(dir);
#else
    (void)f;
#endif
}

static void fsync_parent_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return;
    fsync(fd); /* best effort: some file systems refuse fsync on directories */
    close(fd);
}

int nf_h5_commit(nf_h5 *f)
{
    if (!f) return nf_error(NF_EINVAL, "nf_h5_commit: no file");
    if (!f->tmp) {
        int rc = nf_error(NF_EINVAL, "%s: cannot commit a file opened for reading", f->path);
        nf_h5_close(f);
        return rc;
    }
    int rc = NF_OK;
    if (H5Fflush(f->fid, H5F_SCOPE_GLOBAL) < 0) {
        rc = nf_error(NF_EIO, "%s: cannot write %s (disk full?)", f->path, f->tmp);
        divert_writes(f);
    }
    if (H5Fclose(f->fid) < 0 && rc == NF_OK) rc = nf_error(NF_EIO, "%s: cannot close %s", f->path, f->tmp);
    if (rc == NF_OK) {
        int fd = open(f->tmp, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0) rc = nf_error(NF_EIO, "%s: cannot sync %s (%s)", f->path, f->tmp, strerror(errno));
        if (fd >= 0) close(fd);
    }
    if (rc == NF_OK && rename(f->tmp, f->path) != 0)
        rc = nf_error(NF_EIO, "%s: cannot move %s into place (%s)", f->path, f->tmp, strerror(errno));
    if (rc == NF_OK) fsync_parent_dir(f->path);
    else remove(f->tmp);
    h5_free(f);
    return rc;
}

void nf_h5_abort(nf_h5 *f)
{
    if (!f) return;
    if (f->tmp) divert_writes(f);
    H5Fclose(f->fid);
    if (f->tmp) remove(f->tmp);
    h5_free(f);
}

/* Closing a writer without committing discards it: the file at the path stays as it was. */
void nf_h5_close(nf_h5 *f) { nf_h5_abort(f); }

int nf_h5_open(nf_h5 **out, const char *path, const char *format, int max_version)
{
    *out = NULL;
    h5_init();
    FILE *probe = fopen(path, "rb");
    if (!probe) return nf_error(NF_EIO, "%s: cannot open (%s)", path, strerror(errno));
    fclose(probe);
#if H5_VERSION_GE(1, 12, 0)
    htri_t is = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t is = H5Fis_hdf5(path);
#endif
    if (is <= 0) return nf_error(NF_EFORMAT, "%s: not an HDF5 file", path);
    nf_h5 *f = nf_calloc(1, sizeof *f, "an HDF5 file handle");
    if (!f) return NF_ENOMEM;
    if (!(f->path = dup_str(path))) {
        free(f);
        return nf_error(NF_ENOMEM, "%s: out of memory opening the file", path);
    }
    hid_t fapl = make_fapl(0);
    f->fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f->fid < 0) {
        h5_free(f);
        return nf_error(NF_EIO, "%s: cannot open the HDF5 file (damaged, or locked by another program?)", path);
    }
    int rc = NF_OK;
    int64_t v = 0;
    if (nf_h5_attr_exists(f, "/", "format_version")) rc = nf_h5_attr_get_int64(f, "/", "format_version", &v);
    if (rc != NF_OK && !format) rc = NF_OK, v = 0; /* any HDF5 file: a strange attribute is not our business */
    f->version = (int)v;
    if (rc == NF_OK && format) {
        char have[128];
        if (!nf_h5_attr_exists(f, "/", "format"))
            rc = nf_error(NF_EFORMAT, "%s: no 'format' attribute (expected an nf file of format '%s')", path, format);
        else if ((rc = nf_h5_attr_get_string(f, "/", "format", have, sizeof have)) != NF_OK) {
        } else if (strcmp(have, format) != 0)
            rc = nf_error(NF_EFORMAT, "%s: format '%s' but expected '%s'", path, have, format);
        else if (!nf_h5_attr_exists(f, "/", "format_version"))
            rc = nf_error(NF_EFORMAT, "%s: format '%s' without a 'format_version' attribute", path, have);
        else if (v > max_version)
            rc = nf_error(NF_EFORMAT, "%s: format version %lld is newer than this nf understands (%d); upgrade nf",
                          path, (long long)v, max_version);
    }
    if (rc != NF_OK) {
        nf_h5_close(f);
        return rc;
    }
    *out = f;
    return NF_OK;
}

/* ---- datasets ---------------------------------------------------------------------------------- */

/* Make room for a new dataset at path: parents created, an old dataset of that name removed. */
static int prepare_dataset(nf_h5 *f, const char *path)
{
    NF_TRY(check_writable(f, path));
    const char *slash = strrchr(path, '/');
    if (slash == path && !path[1]) return nf_error(NF_EINVAL, "%s: cannot write a dataset at /", f->path);
    if (slash > path) {
        char parent[OBJ_MAX];
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
        NF_TRY(nf_h5_group(f, parent));
    }
    H5I_type_t k = obj_kind(f->fid, path);
    if (k == H5I_DATASET) {
        if (H5Ldelete(f->fid, path, H5P_DEFAULT) < 0)
            return nf_error(NF_EIO, "%s: cannot replace dataset %s", f->path, path);
    } else if (k != H5I_BADID) {
        return nf_error(NF_EINVAL, "%s: cannot write dataset %s: a group of that name exists", f->path, path);
    }
    return NF_OK;
}

/* Creation properties of a dataset of `rank` dims and elements of elsize bytes: chunks of whole
 * rows (about CHUNK_BYTES, at least one row; a row longer than that is cut in column blocks), each
 * with a Fletcher32 checksum that HDF5 verifies on every read.  An empty dataset has no chunks
 * (HDF5 requires chunk dimensions > 0) and stays contiguous. */
static hid_t checked_dcpl(int rank, const hsize_t *dims, size_t elsize)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0) return dcpl;
    if (dims[0] == 0 || (rank == 2 && dims[1] == 0)) return dcpl;
    hsize_t chunk[2];
    hsize_t per = CHUNK_BYTES / elsize; /* elements per chunk */
    if (rank == 1) {
        chunk[0] = dims[0] < per ? dims[0] : per;
    } else {
        chunk[1] = dims[1] < per ? dims[1] : per;
        hsize_t r = per / chunk[1];
        chunk[0] = r < 1 ? 1 : r > dims[0] ? dims[0] : r;
    }
    if (H5Pset_chunk(dcpl, rank, chunk) < 0 || H5Pset_fletcher32(dcpl) < 0) {
        H5Pclose(dcpl);
        return -1;
    }
    return dcpl;
}

static int write_array(nf_h5 *f, const char *path, hid_t ftype, hid_t mtype, const void *x, size_t rows,
                       size_t cols)
{
    NF_TRY(prepare_dataset(f, path));
    size_t count = cols ? rows * cols : rows;
    if (count && !x) return nf_error(NF_EINVAL, "%s: no data given for dataset %s", f->path, path);
    hsize_t dims[2] = {rows, cols};
    int rank = cols ? 2 : 1;
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = checked_dcpl(rank, dims, H5Tget_size(ftype));
    hid_t d = space < 0 || dcpl < 0 ? -1 : H5Dcreate2(f->fid, path, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = NF_OK;
    if (d < 0) rc = nf_error(NF_EIO, "%s: cannot create dataset %s (%zu x %zu)", f->path, path, rows, cols);
    else if (count && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0)
        rc = nf_error(NF_EIO, "%s: cannot write dataset %s (disk full?)", f->path, path);
    /* closing flushes the last chunks: a full disk can show here first */
    if (d >= 0 && H5Dclose(d) < 0 && rc == NF_OK)
        rc = nf_error(NF_EIO, "%s: cannot write dataset %s (disk full?)", f->path, path);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return rc;
}

int nf_h5_write_real(nf_h5 *f, const char *path, const nf_real *x, size_t rows, size_t cols)
{
#ifdef NF_DOUBLE
    return write_array(f, path, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, x, rows, cols);
#else
    return write_array(f, path, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x, rows, cols);
#endif
}

int nf_h5_write_double(nf_h5 *f, const char *path, const double *x, size_t rows, size_t cols)
{
    return write_array(f, path, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, x, rows, cols);
}

int nf_h5_write_int64(nf_h5 *f, const char *path, const int64_t *x, size_t rows, size_t cols)
{
    return write_array(f, path, H5T_STD_I64LE, H5T_NATIVE_INT64, x, rows, cols);
}

int nf_h5_write_bytes(nf_h5 *f, const char *path, const void *bytes, size_t n)
{
    return write_array(f, path, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes, n, 0);
}

/* Variable-length strings of a character set: UTF-8 as h5py writes for dtype=h5py.string_dtype().
 * Reading uses the file's own set, because HDF5 has no conversion between ASCII and UTF-8. */
static hid_t vlen_str(H5T_cset_t cset)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return t;
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, cset);
    return t;
}

/* A fixed-length UTF-8 string type of len bytes (at least 1), NUL-padded: what nf writes, so its
 * strings live in the object (checksummed with it), not in a global heap. */
static hid_t fixed_utf8(size_t len)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return t;
    if (H5Tset_size(t, len ? len : 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int nf_h5_write_strings(nf_h5 *f, const char *path, const char *const *s, size_t n)
{
    NF_TRY(prepare_dataset(f, path));
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        if (s[i] && strlen(s[i]) > len) len = strlen(s[i]);
    if (n && len > SIZE_MAX / n) return nf_error(NF_ENOMEM, "%s: string dataset %s is too large", f->path, path);
    char *buf = nf_calloc(n ? n * len : 1, 1, "a string list");
    if (!buf) return NF_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (s[i]) memcpy(buf + i * len, s[i], strlen(s[i])); /* NUL-padded, no terminator when full */
    hsize_t dims[1] = {n};
    hid_t t = fixed_utf8(len);
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dcpl = checked_dcpl(1, dims, len);
    hid_t d = (t < 0 || space < 0 || dcpl < 0) ? -1 : H5Dcreate2(f->fid, path, t, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = NF_OK;
    if (d < 0) rc = nf_error(NF_EIO, "%s: cannot create string dataset %s", f->path, path);
    else if (n && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        rc = nf_error(NF_EIO, "%s: cannot write string dataset %s (disk full?)", f->path, path);
    if (d >= 0 && H5Dclose(d) < 0 && rc == NF_OK)
        rc = nf_error(NF_EIO, "%s: cannot write string dataset %s (disk full?)", f->path, path);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (t >= 0) H5Tclose(t);
    free(buf);
    return rc;
}

/* Open a dataset for reading; `expected` says what the caller wanted, for the message. */
static int open_dataset(nf_h5 *f, const char *path, const char *expected, hid_t *d)
{
    NF_TRY(check_obj(f, path));
    H5I_type_t k = obj_kind(f->fid, path);
    if (k == H5I_BADID) return nf_error(NF_EFORMAT, "%s: no dataset %s (expected %s)", f->path, path, expected);
    if (k != H5I_DATASET)
        return nf_error(NF_EFORMAT, "%s: %s is a group, not a dataset (expected %s)", f->path, path, expected);
    *d = H5Dopen2(f->fid, path, H5P_DEFAULT);
    if (*d < 0) return nf_error(NF_EIO, "%s: cannot open dataset %s", f->path, path);
    return NF_OK;
}

/* rank and dims of an open dataset; rank 1 gives dims[1] = 1. */
static int dataset_shape(nf_h5 *f, const char *path, hid_t d, int *rank, size_t dims[2])
{
    hid_t space = H5Dget_space(d);
    int r = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    hsize_t hd[H5S_MAX_RANK] = {0}, hmax[H5S_MAX_RANK] = {0};
    if (r > 0 && r <= H5S_MAX_RANK) H5Sget_simple_extent_dims(space, hd, hmax);
    if (space >= 0) H5Sclose(space);
    if (r < 0) return nf_error(NF_EIO, "%s: cannot read the shape of dataset %s", f->path, path);
    if (r != 1 && r != 2)
        return nf_error(NF_EFORMAT, "%s: dataset %s has %d dimensions (expected a 1-D or 2-D array)", f->path, path, r);
    for (int i = 0; i < r; i++) /* libhdf5 1.10 reads past such a dataspace instead of refusing it */
        if (hmax[i] != H5S_UNLIMITED && hd[i] > hmax[i])
            return nf_error(NF_EFORMAT, "%s: dataset %s: dimension %d is %llu, over its stated maximum %llu (a damaged "
                                        "file)", f->path, path, i, (unsigned long long)hd[i],
                            (unsigned long long)hmax[i]);
    *rank = r;
    dims[0] = (size_t)hd[0];
    dims[1] = r == 2 ? (size_t)hd[1] : 1;
    return NF_OK;
}

int nf_h5_shape(nf_h5 *f, const char *path, int *rank, size_t dims[2])
{
    hid_t d;
    NF_TRY(open_dataset(f, path, "an array", &d));
    int rc = dataset_shape(f, path, d, rank, dims);
    H5Dclose(d);
    return rc;
}

/* The file must hold the count elements a dataset declares (at least min_el bytes each) before
 * anything is allocated for them: a dataset declared 1e8 x 10 but never written (or cut short)
 * would otherwise cost gigabytes of fill values.  Compressed, external and virtual datasets
 * (foreign files) can legitimately store fewer bytes and are not checked. */
static int check_stored(nf_h5 *f, const char *path, hid_t d, size_t count, size_t min_el)
{
    if (!count) return NF_OK;
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return nf_error(NF_EIO, "%s: cannot read the layout of dataset %s", f->path, path);
    int skip = H5Pget_layout(dcpl) == H5D_VIRTUAL || H5Pget_external_count(dcpl) > 0;
    int nfilt = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nfilt && !skip; i++) {
        unsigned flags = 0;
        size_t nelmts = 0;
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelmts, NULL, 0, NULL, NULL);
        if (id != H5Z_FILTER_FLETCHER32 && id != H5Z_FILTER_SHUFFLE) skip = 1; /* compression */
    }
    H5Pclose(dcpl);
    if (skip) return NF_OK;
    double want = (double)count * (double)min_el, have = (double)H5Dget_storage_size(d);
    if (have < want)
        return nf_error(NF_EFORMAT, "%s: dataset %s declares %zu values (%.0f bytes) but the file stores %.0f bytes "
                                    "of them (an unfinished or damaged file)", f->path, path, count, want, have);
    return NF_OK;
}

/* 1 if a stored integer or float type t of class c is one libhdf5 can convert: 1, 2, 4 or 8 bytes
 * (floats 2 to 16), its bits (and a float's sign, exponent and mantissa fields) inside them.
 * libhdf5 1.10 converts a damaged type (precision 0, bits past its size) by reading out of
 * bounds instead of refusing it; later versions refuse it when the file is opened. */
static int numeric_type_sane(hid_t t, H5T_class_t c)
{
    size_t size = H5Tget_size(t), prec = H5Tget_precision(t);
    int off = H5Tget_offset(t);
    int size_ok = c == H5T_INTEGER ? size == 1 || size == 2 || size == 4 || size == 8
                                   : size == 2 || size == 4 || size == 8 || size == 16;
    if (!size_ok) return 0;
    size_t bits = 8 * size;
    if (prec < 1 || prec > bits || off < 0 || (size_t)off > bits - prec) return 0;
    if (c == H5T_FLOAT) {
        size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
        if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return 0;
        if (spos >= bits || esize < 1 || esize > 32 || epos > bits - esize || msize < 1 || mpos > bits - msize ||
            msize > bits)
            return 0;
    }
    return 1;
}

/* Open a dataset of numbers (any stored integer or float type) whose values are all stored: its
 * rank and dims (dims[1] = 1 for rank 1).  d is closed on failure. */
static int open_numeric(nf_h5 *f, const char *path, hid_t *d, int *rank, size_t dims[2])
{
    NF_TRY(open_dataset(f, path, "a numeric array", d));
    hid_t t = H5Dget_type(*d);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    size_t fsize = t < 0 ? 0 : H5Tget_size(t);
    int sane = (c == H5T_INTEGER || c == H5T_FLOAT) && numeric_type_sane(t, c);
    if (t >= 0) H5Tclose(t);
    int rc = sane ? dataset_shape(f, path, *d, rank, dims)
             : c == H5T_INTEGER || c == H5T_FLOAT
                 ? nf_error(NF_EFORMAT, "%s: dataset %s: its number type (%zu bytes) is damaged or not one nf reads "
                                        "(integers of 1, 2, 4 or 8 bytes, floats of 2 to 16)", f->path, path, fsize)
                 : nf_error(NF_EFORMAT, "%s: dataset %s holds %s, not numbers", f->path, path,
                            c == H5T_STRING ? "strings" : "a compound or other non-numeric type");
    if (rc == NF_OK) rc = check_stored(f, path, *d, dims[0] * dims[1], fsize);
    if (rc != NF_OK) H5Dclose(*d);
    return rc;
}

int nf_h5_check_numeric(nf_h5 *f, const char *path)
{
    hid_t d;
    int rank;
    size_t dims[2];
    NF_TRY(open_numeric(f, path, &d, &rank, dims));
    H5Dclose(d);
    return NF_OK;
}

/* Read rows [first, first + nrows) (nrows SIZE_MAX: to the end) of a numeric dataset of any stored
 * type into a new array of mtype (elsize bytes each): a hyperslab of whole rows, so a process of a
 * parallel run reads its share only.  *rows receives the rows read, *total the dataset's rows. */
static int read_array_rows(nf_h5 *f, const char *path, hid_t mtype, size_t elsize, size_t first, size_t nrows, void **x,
                           size_t *rows, size_t *cols, size_t *total)
{
    *x = NULL;
    hid_t d;
    int rank, rc = NF_OK;
    size_t dims[2];
    NF_TRY(open_numeric(f, path, &d, &rank, dims));
    if (rc == NF_OK && dims[1] && dims[0] > SIZE_MAX / dims[1] / elsize)
        rc = nf_error(NF_ENOMEM, "%s: dataset %s (%zu x %zu) is too large for memory", f->path, path, dims[0], dims[1]);
    if (rc == NF_OK && first > dims[0])
        rc = nf_error(NF_EINVAL, "%s: dataset %s has %zu rows; row %zu does not exist", f->path, path, dims[0], first);
    if (rc == NF_OK && nrows > dims[0] - first) nrows = dims[0] - first;
    size_t count = rc == NF_OK ? nrows * dims[1] : 0;
    if (rc == NF_OK && !(*x = malloc(count ? count * elsize : elsize)))
        rc = nf_error(NF_ENOMEM, "%s: out of memory reading dataset %s (%zu x %zu)", f->path, path, nrows, dims[0]);
    hid_t fs = -1, ms = -1;
    herr_t e = 0;
    if (rc == NF_OK && count && nrows == dims[0]) {
        e = H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *x);
    } else if (rc == NF_OK && count) {
        hsize_t start[2] = {first, 0}, n[2] = {nrows, dims[1]}, mn = count; /* rank 1 uses the first entries */
        fs = H5Dget_space(d);
        ms = H5Screate_simple(1, &mn, NULL);
        e = fs < 0 || ms < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, n, NULL);
        if (e >= 0) e = H5Dread(d, mtype, ms, fs, H5P_DEFAULT, *x);
    }
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    if (rc == NF_OK && e < 0)
        rc = nf_error(NF_EIO, "%s: cannot read dataset %s (damaged file: a checksum or structure error)", f->path,
                      path);
    H5Dclose(d);
    if (rc != NF_OK) {
        free(*x);
        *x = NULL;
        return rc;
    }
    *rows = nrows;
    *cols = dims[1];
    if (total) *total = dims[0];
    return NF_OK;
}

/* Rows rows[0..n-1] (any order, repeats allowed; ascending walks the file forwards) of a numeric
 * dataset into a new (n, cols) array of doubles: an HDF5 point selection of every entry of those
 * rows, transferred in the order the points are listed. */
int nf_h5_read_double_points(nf_h5 *f, const char *path, const size_t *rows, size_t n, double **x, size_t *cols)
{
    *x = NULL;
    hid_t d;
    int rank, rc = NF_OK;
    size_t dims[2];
    NF_TRY(open_numeric(f, path, &d, &rank, dims));
    for (size_t i = 0; rc == NF_OK && i < n; i++)
        if (rows[i] >= dims[0])
            rc = nf_error(NF_EINVAL, "%s: dataset %s has %zu rows; row %zu does not exist", f->path, path, dims[0],
                          rows[i]);
    if (rc == NF_OK && dims[1] && n > SIZE_MAX / dims[1] / (2 * sizeof(hsize_t)))
        rc = nf_error(NF_ENOMEM, "%s: %zu rows of dataset %s are too many to select", f->path, n, path);
    const size_t count = rc == NF_OK ? n * dims[1] : 0, r = rank == 1 ? 1 : 2;
    hsize_t *coord = count ? malloc(count * r * sizeof *coord) : NULL;
    if (rc == NF_OK && (!(*x = malloc((count ? count : 1) * sizeof **x)) || (count && !coord)))
        rc = nf_error(NF_ENOMEM, "%s: out of memory reading %zu rows of dataset %s", f->path, n, path);
    for (size_t i = 0, k = 0; rc == NF_OK && i < n; i++)
        for (size_t j = 0; j < dims[1]; j++, k++) {
            coord[k * r] = rows[i];
            if (r == 2) coord[k * r + 1] = j;
        }
    hid_t fs = -1, ms = -1;
    herr_t e = 0;
    if (rc == NF_OK && count) {
        hsize_t mn = count;
        fs = H5Dget_space(d);
        ms = H5Screate_simple(1, &mn, NULL);
        e = fs < 0 || ms < 0 ? -1 : H5Sselect_elements(fs, H5S_SELECT_SET, count, coord);
        if (e >= 0) e = H5Dread(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, *x);
    }
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    free(coord);
    if (rc == NF_OK && e < 0)
        rc = nf_error(NF_EIO, "%s: cannot read dataset %s (damaged file: a checksum or structure error)", f->path,
                      path);
    H5Dclose(d);
    if (rc != NF_OK) {
        free(*x);
        *x = NULL;
        return rc;
    }
    *cols = dims[1];
    return NF_OK;
}

static int read_array(nf_h5 *f, const char *path, hid_t mtype, size_t elsize, void **x, size_t *rows, size_t *cols)
{
    return read_array_rows(f, path, mtype, elsize, 0, SIZE_MAX, x, rows, cols, NULL);
}

int nf_h5_read_real_rows(nf_h5 *f, const char *path, size_t first, size_t n, nf_real **x, size_t *rows, size_t *cols,
                         size_t *total)
{
    hid_t mt = sizeof(nf_real) == sizeof(double) ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
    return read_array_rows(f, path, mt, sizeof(nf_real), first, n, (void **)x, rows, cols, total);
}

int nf_h5_read_double_rows(nf_h5 *f, const char *path, size_t first, size_t n, double **x, size_t *rows, size_t *cols,
                           size_t *total)
{
    return read_array_rows(f, path, H5T_NATIVE_DOUBLE, sizeof(double), first, n, (void **)x, rows, cols, total);
}

int nf_h5_read_int64_rows(nf_h5 *f, const char *path, size_t first, size_t n, int64_t **x, size_t *rows, size_t *cols,
                          size_t *total)
{
    return read_array_rows(f, path, H5T_NATIVE_INT64, sizeof(int64_t), first, n, (void **)x, rows, cols, total);
}

int nf_h5_read_real(nf_h5 *f, const char *path, nf_real **x, size_t *rows, size_t *cols)
{
#ifdef NF_DOUBLE
    return read_array(f, path, H5T_NATIVE_DOUBLE, sizeof(nf_real), (void **)x, rows, cols);
#else
    return read_array(f, path, H5T_NATIVE_FLOAT, sizeof(nf_real), (void **)x, rows, cols);
#endif
}

int nf_h5_read_double(nf_h5 *f, const char *path, double **x, size_t *rows, size_t *cols)
{
    return read_array(f, path, H5T_NATIVE_DOUBLE, sizeof(double), (void **)x, rows, cols);
}

int nf_h5_read_int64(nf_h5 *f, const char *path, int64_t **x, size_t *rows, size_t *cols)
{
    return read_array(f, path, H5T_NATIVE_INT64, sizeof(int64_t), (void **)x, rows, cols);
}

int nf_h5_read_bytes(nf_h5 *f, const char *path, void **bytes, size_t *n)
{
    *bytes = NULL;
    hid_t d;
    NF_TRY(open_dataset(f, path, "bytes", &d));
    hid_t t = H5Dget_type(d);
    int ok = t >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1;
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    if (!ok) return nf_error(NF_EFORMAT, "%s: dataset %s does not hold bytes (expected 8-bit integers)", f->path, path);
    size_t rows, cols;
    NF_TRY(read_array(f, path, H5T_NATIVE_UINT8, 1, bytes, &rows, &cols));
    *n = rows * cols;
    return NF_OK;
}

void nf_h5_strings_free(char **s, size_t n)
{
    if (!s) return;
    for (size_t i = 0; i < n; i++) free(s[i]);
    free(s);
}

/* Copy a fixed-length string of at most len bytes, dropping NUL or space padding. */
static char *fixed_str(const char *p, size_t len, H5T_str_t pad)
{
    size_t n = 0;
    while (n < len && p[n]) n++;
    if (pad == H5T_STR_SPACEPAD)
        while (n > 0 && p[n - 1] == ' ') n--;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

int nf_h5_read_strings(nf_h5 *f, const char *path, char ***s, size_t *n)
{
    *s = NULL;
    hid_t d;
    NF_TRY(open_dataset(f, path, "a list of strings", &d));
    hid_t ft = H5Dget_type(d), space = H5Dget_space(d);
    hssize_t np = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    int rc = NF_OK;
    if (ft < 0 || np < 0) rc = nf_error(NF_EIO, "%s: cannot read dataset %s", f->path, path);
    else if (H5Tget_class(ft) != H5T_STRING)
        rc = nf_error(NF_EFORMAT, "%s: dataset %s does not hold strings", f->path, path);
    size_t count = np > 0 ? (size_t)np : 0;
    if (rc == NF_OK) rc = check_stored(f, path, d, count, H5Tis_variable_str(ft) > 0 ? 1 : H5Tget_size(ft));
    char **out = rc == NF_OK ? nf_calloc(count, sizeof *out, "a string list") : NULL;
    if (rc == NF_OK && !out) rc = NF_ENOMEM;
    if (rc == NF_OK && count && H5Tis_variable_str(ft) > 0) {
        hid_t mt = vlen_str(H5Tget_cset(ft));
        char **raw = nf_calloc(count, sizeof *raw, "a string list");
        if (!raw) rc = NF_ENOMEM;
        else if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read string dataset %s (damaged file?)", f->path, path);
        else {
            for (size_t i = 0; i < count && rc == NF_OK; i++)
                if (!(out[i] = dup_str(raw[i] ? raw[i] : ""))) rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
#if H5_VERSION_GE(1, 12, 0)
            H5Treclaim(mt, space, H5P_DEFAULT, raw);
#else
            H5Dvlen_reclaim(mt, space, H5P_DEFAULT, raw);
#endif
        }
        free(raw);
        H5Tclose(mt);
    } else if (rc == NF_OK && count) {
        size_t len = H5Tget_size(ft);
        char *raw = len && count <= SIZE_MAX / len ? malloc(count * len) : NULL;
        if (!raw) rc = nf_error(NF_ENOMEM, "%s: out of memory reading string dataset %s", f->path, path);
        else if (H5Dread(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read string dataset %s (damaged file: a checksum or structure error)",
                          f->path, path);
        for (size_t i = 0; i < count && rc == NF_OK; i++)
            if (!(out[i] = fixed_str(raw + i * len, len, H5Tget_strpad(ft))))
                rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
        free(raw);
    }
    if (ft >= 0) H5Tclose(ft);
    if (space >= 0) H5Sclose(space);
    H5Dclose(d);
    if (rc != NF_OK) {
        nf_h5_strings_free(out, count);
        return rc;
    }
    *s = out;
    *n = count;
    return NF_OK;
}

/* ---- attributes -------------------------------------------------------------------------------- */

int nf_h5_attr_exists(nf_h5 *f, const char *obj, const char *name)
{
    if (!obj || obj[0] != '/' || strlen(obj) >= OBJ_MAX || !obj_exists(f->fid, obj)) return 0;
    return H5Aexists_by_name(f->fid, obj, name, H5P_DEFAULT) > 0;
}

/* Write a scalar attribute, replacing one of the same name. */
static int attr_set(nf_h5 *f, const char *obj, const char *name, hid_t ftype, hid_t mtype, const void *value)
{
    NF_TRY(check_writable(f, obj));
    if (!obj_exists(f->fid, obj))
        return nf_error(NF_EINVAL, "%s: cannot set attribute '%s': no object %s", f->path, name, obj);
    hid_t o = H5Oopen(f->fid, obj, H5P_DEFAULT);
    if (o < 0) return nf_error(NF_EIO, "%s: cannot open %s", f->path, obj);
    if (H5Aexists(o, name) > 0) H5Adelete(o, name);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(o, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = NF_OK;
    if (a < 0 || H5Awrite(a, mtype, value) < 0)
        rc = nf_error(NF_EIO, "%s: cannot write attribute '%s' on %s", f->path, name, obj);
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
    return rc;
}

int nf_h5_attr_set_string(nf_h5 *f, const char *obj, const char *name, const char *value)
{
    if (!value) value = "";
    size_t len = strlen(value);
    char *buf = calloc(len ? len : 1, 1);
    if (!buf) return nf_error(NF_ENOMEM, "%s: out of memory writing attribute '%s'", f->path, name);
    memcpy(buf, value, len);
    hid_t t = fixed_utf8(len);
    int rc = t < 0 ? nf_error(NF_EIO, "%s: cannot make a string type for attribute '%s'", f->path, name)
                   : attr_set(f, obj, name, t, t, buf);
    if (t >= 0) H5Tclose(t);
    free(buf);
    return rc;
}

int nf_h5_attr_set_double(nf_h5 *f, const char *obj, const char *name, double value)
{
    return attr_set(f, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

int nf_h5_attr_set_int64(nf_h5 *f, const char *obj, const char *name, int64_t value)
{
    return attr_set(f, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

/* Open a one-element attribute; *cls receives its type class. */
static int attr_open(nf_h5 *f, const char *obj, const char *name, hid_t *a, H5T_class_t *cls)
{
    NF_TRY(check_obj(f, obj));
    if (!nf_h5_attr_exists(f, obj, name))
        return nf_error(NF_EFORMAT, "%s: no attribute '%s' on %s", f->path, name, obj);
    *a = H5Aopen_by_name(f->fid, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (*a < 0) return nf_error(NF_EIO, "%s: cannot open attribute '%s' on %s", f->path, name, obj);
    hid_t t = H5Aget_type(*a), space = H5Aget_space(*a);
    *cls = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    int damaged = (*cls == H5T_INTEGER || *cls == H5T_FLOAT) && !numeric_type_sane(t, *cls);
    hssize_t np = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (t >= 0) H5Tclose(t);
    if (space >= 0) H5Sclose(space);
    if (damaged) {
        H5Aclose(*a);
        return nf_error(NF_EFORMAT, "%s: attribute '%s' on %s: its number type is damaged", f->path, name, obj);
    }
    if (np != 1) {
        H5Aclose(*a);
        return nf_error(NF_EFORMAT, "%s: attribute '%s' on %s holds %lld values (expected one)", f->path, name, obj,
                        (long long)np);
    }
    return NF_OK;
}

int nf_h5_attr_get_string(nf_h5 *f, const char *obj, const char *name, char *buf, size_t size)
{
    hid_t a;
    H5T_class_t c;
    NF_TRY(attr_open(f, obj, name, &a, &c));
    if (c != H5T_STRING) {
        H5Aclose(a);
        return nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is not a string", f->path, name, obj);
    }
    hid_t ft = H5Aget_type(a);
    char *s = NULL;
    int rc = NF_OK;
    if (H5Tis_variable_str(ft) > 0) {
        hid_t mt = vlen_str(H5Tget_cset(ft));
        char *raw = NULL;
        if (H5Aread(a, mt, &raw) < 0) rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
        else if (!(s = dup_str(raw ? raw : ""))) rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
        if (raw) H5free_memory(raw);
        H5Tclose(mt);
    } else {
        size_t len = H5Tget_size(ft);
        char *raw = malloc(len + 1);
        if (!raw) rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
        else if (H5Aread(a, ft, raw) < 0) rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
        else if (!(s = fixed_str(raw, len, H5Tget_strpad(ft)))) rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
        free(raw);
    }
    H5Tclose(ft);
    H5Aclose(a);
    if (rc == NF_OK && strlen(s) >= size)
        rc = nf_error(NF_EINVAL, "%s: attribute '%s' on %s is %zu characters long (room for %zu)", f->path, name,
                      obj, strlen(s), size ? size - 1 : 0);
    if (rc == NF_OK) memcpy(buf, s, strlen(s) + 1);
    free(s);
    return rc;
}

int nf_h5_attr_get_double(nf_h5 *f, const char *obj, const char *name, double *value)
{
    hid_t a;
    H5T_class_t c;
    NF_TRY(attr_open(f, obj, name, &a, &c));
    int rc = NF_OK;
    if (c != H5T_INTEGER && c != H5T_FLOAT)
        rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is not a number", f->path, name, obj);
    else if (H5Aread(a, H5T_NATIVE_DOUBLE, value) < 0)
        rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
    H5Aclose(a);
    return rc;
}

int nf_h5_attr_get_int64(nf_h5 *f, const char *obj, const char *name, int64_t *value)
{
    hid_t a;
    H5T_class_t c;
    NF_TRY(attr_open(f, obj, name, &a, &c));
    int rc = NF_OK;
    double d = 0;
    if (c == H5T_INTEGER) {
        if (H5Aread(a, H5T_NATIVE_INT64, value) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
    } else if (c == H5T_FLOAT) {
        /* A float that holds a whole number (h5py users write 3.0) is accepted; 2.5 is not. */
        if (H5Aread(a, H5T_NATIVE_DOUBLE, &d) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
        else if (!(d >= -9.2e18 && d <= 9.2e18) || d != (double)(int64_t)d)
            rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is %g (expected an integer)", f->path, name, obj, d);
        else *value = (int64_t)d;
    } else {
        rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is not a number", f->path, name, obj);
    }
    H5Aclose(a);
    return rc;
}

int nf_h5_attr_get_int64_in(nf_h5 *f, const char *obj, const char *name, int64_t lo, int64_t hi, int64_t *value)
{
    int64_t v;
    NF_TRY(nf_h5_attr_get_int64(f, obj, name, &v));
    if (v < lo || v > hi)
        return nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is %lld (expected %lld to %lld)", f->path, name, obj,
                        (long long)v, (long long)lo, (long long)hi);
    *value = v;
    return NF_OK;
}

int nf_h5_attr_set_int64s(nf_h5 *f, const char *obj, const char *name, const int64_t *v, size_t n)
{
    NF_TRY(check_writable(f, obj));
    if (!obj_exists(f->fid, obj))
        return nf_error(NF_EINVAL, "%s: cannot set attribute '%s': no object %s", f->path, name, obj);
    hid_t o = H5Oopen(f->fid, obj, H5P_DEFAULT);
    if (o < 0) return nf_error(NF_EIO, "%s: cannot open %s", f->path, obj);
    if (H5Aexists(o, name) > 0) H5Adelete(o, name);
    hsize_t dim = n;
    hid_t space = H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(o, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = NF_OK;
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT64, v) < 0)
        rc = nf_error(NF_EIO, "%s: cannot write attribute '%s' on %s", f->path, name, obj);
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
    return rc;
}

int nf_h5_attr_get_int64s(nf_h5 *f, const char *obj, const char *name, int64_t *v, size_t n)
{
    NF_TRY(check_obj(f, obj));
    if (!nf_h5_attr_exists(f, obj, name))
        return nf_error(NF_EFORMAT, "%s: no attribute '%s' on %s", f->path, name, obj);
    hid_t a = H5Aopen_by_name(f->fid, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return nf_error(NF_EIO, "%s: cannot open attribute '%s' on %s", f->path, name, obj);
    hid_t t = H5Aget_type(a), space = H5Aget_space(a);
    H5T_class_t cls = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    int damaged = (cls == H5T_INTEGER || cls == H5T_FLOAT) && !numeric_type_sane(t, cls);
    hssize_t np = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (t >= 0) H5Tclose(t);
    if (space >= 0) H5Sclose(space);
    int rc = NF_OK;
    double *d = NULL;
    if (damaged)
        rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s: its number type is damaged", f->path, name, obj);
    else if (np != (hssize_t)n)
        rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s holds %lld values (expected %zu)", f->path, name, obj,
                      (long long)np, n);
    else if (cls == H5T_INTEGER) {
        if (H5Aread(a, H5T_NATIVE_INT64, v) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
    } else if (cls == H5T_FLOAT) {
        if (!(d = malloc((n ? n : 1) * sizeof *d))) rc = nf_error(NF_ENOMEM, "%s: out of memory", f->path);
        else if (H5Aread(a, H5T_NATIVE_DOUBLE, d) < 0)
            rc = nf_error(NF_EIO, "%s: cannot read attribute '%s' on %s", f->path, name, obj);
        for (size_t i = 0; rc == NF_OK && i < n; i++) {
            if (!(d[i] >= -9.2e18 && d[i] <= 9.2e18) || d[i] != (double)(int64_t)d[i])
                rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s holds %g (expected integers)", f->path, name,
                              obj, d[i]);
            else v[i] = (int64_t)d[i];
        }
    } else {
        rc = nf_error(NF_EFORMAT, "%s: attribute '%s' on %s is not numeric", f->path, name, obj);
    }
    free(d);
    H5Aclose(a);
    return rc;
}
