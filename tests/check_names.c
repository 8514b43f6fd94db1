/* tests/check_names.c - names of data columns and context values (datasets/names.h): reading and
 * writing them in data and model files, counts that do not match, and contexts given by name
 * (one-hot groups, numeric entries, categories holding commas, every error with its message). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "datasets/names.h"

static char tmpdir[256];

#define OK(expr) ck_assert_msg((expr) == NF_OK, "%s failed: %s", #expr, nf_strerror_last())
#define HAS(msg, part) ck_assert_msg(strstr((msg), (part)) != NULL, "message '%s' lacks '%s'", (msg), (part))

static char *COLS[] = {"eruptions", "waiting"};
static char *CTX[] = {"kind=long", "kind=medium", "kind=short", "site=a, b", "site=c", "temp"};

static nf_data_names names6(void)
{
    nf_data_names nm = {.d = 2, .c = 6, .columns = COLS, .context = CTX};
    return nm;
}

START_TEST(test_names_round_trip)
{
    char path[300];
    snprintf(path, sizeof path, "%s/names.h5", tmpdir);
    nf_data_names nm = names6(), back;
    nf_h5 *f;
    OK(nf_h5_create(&f, path, "nf-model", 2));
    OK(nf_data_names_write(&nm, f, "/data"));
    OK(nf_data_names_write(&nm, f, "/"));
    OK(nf_h5_commit(f));
    OK(nf_data_names_load(&back, path, "/data", 2, 6));
    ck_assert_str_eq(back.columns[1], "waiting");
    ck_assert_str_eq(back.context[3], "site=a, b");
    nf_data_names copy;
    OK(nf_data_names_copy(&copy, &back));
    nf_data_names_free(&back);
    ck_assert_ptr_null(back.columns);
    ck_assert_str_eq(copy.context[5], "temp");
    nf_data_names_free(&copy);
    nf_data_names_free(NULL);
    /* the root lists, for a data file; d == 0 skips the columns */
    OK(nf_data_names_load(&back, path, "/", 0, 6));
    ck_assert_ptr_null(back.columns);
    ck_assert_str_eq(back.context[0], "kind=long");
    nf_data_names_free(&back);
    /* counts that do not match the data are format errors naming the dataset */
    ck_assert_int_eq(nf_data_names_load(&back, path, "/data", 3, 6), NF_EFORMAT);
    HAS(nf_strerror_last(), "names.h5:/data/columns has 2 names, expected 3 (one per column of the data)");
    ck_assert_int_eq(nf_data_names_load(&back, path, "/", 2, 4), NF_EFORMAT);
    HAS(nf_strerror_last(), "names.h5:/context_names has 6 names, expected 4 (one per context value)");
    ck_assert_ptr_null(back.columns);
    /* a file without names: NULL lists and the default names x<j>, c<k> */
    char bare[300];
    snprintf(bare, sizeof bare, "%s/bare.h5", tmpdir);
    OK(nf_h5_create(&f, bare, "nf-data", 1));
    OK(nf_h5_commit(f));
    OK(nf_data_names_load(&back, bare, "/", 2, 1));
    ck_assert_ptr_null(back.columns);
    ck_assert_ptr_null(back.context);
    char b[32];
    ck_assert_str_eq(nf_data_names_column(&back, 1, b, sizeof b), "x1");
    ck_assert_str_eq(nf_data_names_context(&back, 0, b, sizeof b), "c0");
    nf_data_names_free(&back);
}
END_TEST

START_TEST(test_context_parse)
{
    nf_data_names nm = names6();
    nf_real c[6];
    OK(nf_context_parse(&nm, "kind=medium, site=a, b ,temp=21.5", c));
    const nf_real want[6] = {0, 1, 0, 1, 0, (nf_real)21.5};
    for (int k = 0; k < 6; k++) ck_assert_msg(c[k] == want[k], "entry %d: %g", k, (double)c[k]);
    char buf[128];
    nf_context_format(&nm, c, buf, sizeof buf);
    ck_assert_str_eq(buf, "kind=medium,site=a, b,temp=21.5");
    nf_real again[6];
    OK(nf_context_parse(&nm, buf, again));
    ck_assert(memcmp(c, again, sizeof c) == 0);
    OK(nf_context_parse(&nm, "temp=-3,site=c,kind=short", c));
    ck_assert(c[2] == 1 && c[4] == 1 && c[5] == -3 && c[0] == 0 && c[3] == 0);
    /* not one-hot: the group is written with '?' */
    c[0] = 1;
    nf_context_format(&nm, c, buf, sizeof buf);
    ck_assert_str_eq(buf, "kind=?,site=c,temp=-3");

    ck_assert_int_eq(nf_context_parse(&nm, "kind=lng,site=c,temp=1", c), NF_EINVAL);
    HAS(nf_strerror_last(), "no context value 'kind=lng' (expected: kind=long, kind=medium, kind=short");
    ck_assert_int_eq(nf_context_parse(&nm, "kind=long,kind=short,site=c,temp=1", c), NF_EINVAL);
    HAS(nf_strerror_last(), "kind is given twice");
    ck_assert_int_eq(nf_context_parse(&nm, "kind=long,temp=1", c), NF_EINVAL);
    HAS(nf_strerror_last(), "no value for site (expected one of site=a, b, site=c)");
    ck_assert_int_eq(nf_context_parse(&nm, "kind=long,site=c", c), NF_EINVAL);
    HAS(nf_strerror_last(), "no value for temp (expected temp=NUMBER)");
    ck_assert_int_eq(nf_context_parse(&nm, "kind=long,site=c,temp=warm", c), NF_EINVAL);
    HAS(nf_strerror_last(), "temp needs a finite number, not 'warm'");
    ck_assert_int_eq(nf_context_parse(&nm, "long", c), NF_EINVAL);
    HAS(nf_strerror_last(), "'long': expected NAME=VALUE");

    /* without stored names: c0, c1 are numeric entries */
    nf_data_names bare = {.d = 2, .c = 2};
    nf_real two[2];
    OK(nf_context_parse(&bare, "c1=2.385,c0=1", two));
    ck_assert(two[0] == 1 && two[1] == (nf_real)2.385);
    ck_assert_int_eq(nf_context_parse(&bare, "c0=1", two), NF_EINVAL);
    HAS(nf_strerror_last(), "no value for c1");
    nf_data_names none = {.d = 2, .c = 0};
    ck_assert_int_eq(nf_context_parse(&none, "kind=long", two), NF_EINVAL);
    HAS(nf_strerror_last(), "the model takes no context");
}
END_TEST

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nf_check_names_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names_round_trip);
    tcase_add_test(tc, test_context_parse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char p[600];
    snprintf(p, sizeof p, "%s/names.h5", tmpdir);
    remove(p);
    snprintf(p, sizeof p, "%s/bare.h5", tmpdir);
    remove(p);
    rmdir(tmpdir);
    return failed ? 1 : 0;
}
