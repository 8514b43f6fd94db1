/* tests/cli/h5reldiff.c - max |a - b| / max |a| between one numeric dataset of two HDF5 files
 * (read as double), printed with %.3e; exit 1 if either is missing or their sizes differ.
 * Usage: h5reldiff A.h5 B.h5 /DATASET   (a helper of tests/cli/mpi.sh, built by it) */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double *read_all(const char *path, const char *name, hssize_t *n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
    hid_t s = d < 0 ? -1 : H5Dget_space(d);
    *n = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    double *x = *n > 0 ? malloc((size_t)*n * sizeof *x) : NULL;
    if (x && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0) free(x), x = NULL;
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (!x) fprintf(stderr, "h5reldiff: cannot read %s:%s\n", path, name);
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: h5reldiff A.h5 B.h5 /DATASET\n");
        return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hssize_t na, nb;
    double *a = read_all(argv[1], argv[3], &na), *b = read_all(argv[2], argv[3], &nb);
    if (!a || !b || na != nb) {
        if (a && b) fprintf(stderr, "h5reldiff: %lld and %lld values\n", (long long)na, (long long)nb);
        return 1;
    }
    double dmax = 0, amax = 0;
    for (hssize_t i = 0; i < na; i++) {
        dmax = fmax(dmax, fabs(a[i] - b[i]));
        amax = fmax(amax, fabs(a[i]));
    }
    printf("%.3e\n", amax > 0 ? dmax / amax : dmax);
    free(a), free(b);
    return 0;
}
