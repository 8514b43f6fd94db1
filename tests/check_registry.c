/* tests/check_registry.c - every registered bijector type through the shared checks, by looping over
 * the registry (nf_bijector_types[], flows/registry.c) instead of a hand-written table, so a newly
 * registered type is tested without anyone remembering to add it here.
 *
 * For every entry:
 *   interface  a name, an options line, create/workspace/forward/inverse/backward (and destroy where
 *              create leaves state behind); nf_bijector_type_find(name) returns it; names unique;
 *   builds     with default options ("") at D = 4 and 6, without context and with a context of 3;
 *   checks     nf_check_bijector_all (round trip with a far-tail row, forward(inverse(z)), brute-force
 *              log-determinant and finite-difference gradients of parameters, inputs and context, in
 *              both builds with steps and tolerances from the build's precision, inverse gradients
 *              wherever type->inverse_backward exists) in evaluation
 *              mode at those four shapes, in training mode (b->training = 1: batch statistics,
 *              initialisation from the first batch) at two, and after init_data at two for the types
 *              that have one;
 *   sentinel   every case of every type ran to the end: a type skipped, or a case that stopped early,
 *              fails here.
 * The default path is the loop.  What a type needs beyond it is in `notes` below, one row per type
 * with the reason; today only input domains (logit, sigmoid).  The type-specific tests (known values,
 * error paths, solver behaviour) stay in the tests/check_bij_*.c suites.
 *
 * Linking: the registry array takes the address of every type, which pulls each object out of the
 * static libnf.a; test_interface checks that no entry is missing. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "flows/bijector.h"
#include "tests/testutil.h"

/* What a type needs beyond the default path, and why.  A row must name a registered type, and an
 * options exception must still be needed (create with "" must fail somewhere), or the suite fails. */
typedef struct type_note {
    const char *name;
    const char *options; /* NULL: the defaults ("") */
    double lo, hi;       /* input domain for x (nf_bij_inputs), when hi > lo */
    const char *why;
} type_note;

static const type_note notes[] = {
    {"logit", NULL, 0.01, 0.99,
     "forward takes data in [0, 1] (refuses anything outside with NF_EDATA); x ~ U(0.01, 0.99), and the far-tail "
     "row moves toward 0 and 1 instead of outward"},
    {"sigmoid", NULL, -5.0, 5.0,
     "inverse takes latents strictly inside (0, 1): they are drawn as sigmoid(x), x ~ U(-5, 5)"},
    {"squeeze", "h=2,w=2,c=1", 0, 0,
     "needs an image of even height and width (the default 1x1xD is refused); a 2x2x1 image in the first 4 "
     "entries, the rest of D = 6 passing through"},
};
#define NNOTES ((int)(sizeof notes / sizeof notes[0]))

static const type_note *note_of(const nf_bijector_type *t)
{
    for (int k = 0; k < NNOTES; k++)
        if (strcmp(notes[k].name, t->name) == 0) return &notes[k];
    return NULL;
}

/* The shapes every type is built and checked at, and the subset for the training / init_data modes. */
static const struct { int dim, ctx_dim; } shapes[] = {{4, 0}, {4, 3}, {6, 0}, {6, 3}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))
static const int mode_shapes[] = {0, 3}; /* (4, 0) and (6, 3) */
#define NMODE_SHAPES ((int)(sizeof mode_shapes / sizeof mode_shapes[0]))

/* The noise on the parameters.  The other suites add 0.25 to networks of hidden=8..16; the defaults
 * here are hidden=64 (spline-coupling: two residual blocks), whose pre-activations spread with the
 * square root of the fan-in, and 0.25 gives spline parameters so extreme that the maps are
 * ill-conditioned (float round trips off by 0.1, brute-force Jacobians by 1e-6).  0.25 sqrt(8 / 64) ~
 * 0.09 gives the spread of 0.25 at hidden=8; 0.08 keeps a margin (0.125 still fails spline-coupling,
 * 0.03 .. 0.1 pass), and every map stays clearly away from the identity. */
#define PARAM_NOISE 0.08

enum { MODE_EVAL, MODE_TRAINING, MODE_INIT_DATA };
static const char *const mode_names[] = {"evaluation", "training", "after init_data"};

typedef struct reg_case {
    size_t type;   /* index into nf_bijector_types */
    int mode;
    nf_bij_case c;
    nf_bij_inputs in;
} reg_case;

#define MAX_CASES 1024
static reg_case cases[MAX_CASES];
static int ncases;

/* Cases a type gets from the loop: every shape in evaluation mode, and the mode shapes in training
 * mode and (types with init_data) after init_data. */
static int cases_expected(const nf_bijector_type *t)
{
    return NSHAPES + NMODE_SHAPES + (t->init_data ? NMODE_SHAPES : 0);
}

static void add_case(size_t i, int mode, int shape)
{
    const nf_bijector_type *t = nf_bijector_types[i];
    const type_note *nt = note_of(t);
    if (ncases == MAX_CASES) return; /* the sentinel reports the cases missing */
    reg_case *r = &cases[ncases++];
    memset(r, 0, sizeof *r);
    r->type = i;
    r->mode = mode;
    r->c.type_name = t->name;
    r->c.options = nt && nt->options ? nt->options : "";
    r->c.dim = shapes[shape].dim;
    r->c.ctx_dim = shapes[shape].ctx_dim;
    r->c.no_inverse_grad = t->inverse_backward == NULL;
    r->c.training = mode == MODE_TRAINING;
    if (nt) r->in.lo = nt->lo, r->in.hi = nt->hi;
    r->in.init_data = mode == MODE_INIT_DATA;
    r->in.param_noise = PARAM_NOISE;
}

/* The case list, from the registry alone.  Entries that are NULL (a type not linked) get no cases:
 * test_interface and the sentinel report them. */
static void plan_cases(void)
{
    ncases = 0;
    for (size_t i = 0; i < nf_bijector_ntypes; i++) {
        const nf_bijector_type *t = nf_bijector_types[i];
        if (!t || !t->name) continue;
        for (int s = 0; s < NSHAPES; s++) add_case(i, MODE_EVAL, s);
        for (int s = 0; s < NMODE_SHAPES; s++) add_case(i, MODE_TRAINING, mode_shapes[s]);
        if (t->init_data)
            for (int s = 0; s < NMODE_SHAPES; s++) add_case(i, MODE_INIT_DATA, mode_shapes[s]);
    }
}

/* One byte per case, set when the case's checks have all run.  A file rather than a variable: with
 * Check's default fork mode each test runs in its own process, and the sentinel in another. */
static FILE *done_file;

static void mark_done(int k)
{
    const unsigned char one = 1;
    ck_assert_msg(done_file && pwrite(fileno(done_file), &one, 1, (off_t)k) == 1, "cannot record case %d", k);
}

START_TEST(test_interface)
{
    ck_assert_msg(nf_bijector_ntypes > 0, "the registry is empty");
    for (size_t i = 0; i < nf_bijector_ntypes; i++) {
        const nf_bijector_type *t = nf_bijector_types[i];
        ck_assert_msg(t != NULL, "registry entry %zu is NULL (its object was not linked)", i);
        ck_assert_msg(t->name && t->name[0], "registry entry %zu has no name", i);
        const char *nm = t->name;
        ck_assert_msg(t->options_help && t->options_help[0], "%s: no options_help", nm);
        ck_assert_msg(t->create, "%s: no create", nm);
        ck_assert_msg(t->workspace, "%s: no workspace", nm);
        ck_assert_msg(t->forward, "%s: no forward", nm);
        ck_assert_msg(t->inverse, "%s: no inverse", nm);
        ck_assert_msg(t->backward, "%s: no backward", nm);
        ck_assert_msg(nf_bijector_type_find(nm) == t, "nf_bijector_type_find(\"%s\") does not return entry %zu", nm, i);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(nf_bijector_types[j]->name, nm) != 0, "entries %zu and %zu are both named %s", j, i, nm);
    }
    ck_assert_ptr_null(nf_bijector_type_find("no-such-bijector"));
    for (int k = 0; k < NNOTES; k++)
        ck_assert_msg(nf_bijector_type_find(notes[k].name) != NULL, "notes[%d] names '%s', which is not registered", k,
                      notes[k].name);
}
END_TEST

/* Every type builds with its options at every shape; a type whose create leaves state behind has a
 * destroy (sigmoid keeps none, and nf_bijector_destroy skips a NULL destroy); an options exception
 * is still needed, i.e. the defaults fail at some shape. */
START_TEST(test_build)
{
    const nf_bijector_type *t = nf_bijector_types[_i];
    ck_assert_ptr_nonnull(t);
    const type_note *nt = note_of(t);
    const char *opts = nt && nt->options ? nt->options : "";
    int defaults_fail = 0;
    for (int s = 0; s < NSHAPES; s++) {
        nf_params *P = nf_params_alloc(), *S = nf_params_alloc();
        nf_rng *rng = nf_rng_alloc(2385, 0);
        nf_bijector b;
        int D = shapes[s].dim, C = shapes[s].ctx_dim;
        int rc = nf_bijector_create(&b, t, D, C, "r0", opts, P, S, rng);
        ck_assert_msg(rc == NF_OK, "%s(\"%s\") at D = %d, C = %d: %s", t->name, opts, D, C, nf_strerror_last());
        ck_assert_msg(b.type == t && b.dim == D && b.ctx_dim == C, "%s: instance fields not set", t->name);
        ck_assert_msg(b.state == NULL || t->destroy != NULL, "%s: create leaves state but the type has no destroy",
                      t->name);
        nf_bijector_destroy(&b);
        if (opts[0]) {
            nf_bijector d;
            if (nf_bijector_create(&d, t, D, C, "r1", "", P, S, rng) != NF_OK) defaults_fail = 1;
            else nf_bijector_destroy(&d);
        }
        nf_rng_free(rng);
        nf_params_free(P);
        nf_params_free(S);
    }
    if (opts[0])
        ck_assert_msg(defaults_fail, "%s builds with default options at every shape: drop its options exception (%s)",
                      t->name, nt->why);
}
END_TEST

START_TEST(test_case)
{
    const reg_case *r = &cases[_i];
    const nf_bijector_type *t = nf_bijector_types[r->type];
    /* say which case a failure or a crash belongs to; the message of a failed check names the type */
    ck_assert_msg(nf_bijector_type_find(r->c.type_name) == t, "case %d: %s not found by name", _i, r->c.type_name);
    nf_check_bijector_all_inputs(&r->c, &r->in);
    mark_done(_i);
}
END_TEST

/* Runs after "checks" (Check runs test cases in the order they were added), so run it with them:
 * CK_RUN_CASE=sentinel alone finds nothing done. */
START_TEST(test_sentinel)
{
    unsigned char done[MAX_CASES] = {0};
    ck_assert_msg(done_file && pread(fileno(done_file), done, (size_t)ncases, 0) >= 0, "cannot read the case record");
    size_t covered = 0;
    for (size_t i = 0; i < nf_bijector_ntypes; i++) {
        const nf_bijector_type *t = nf_bijector_types[i];
        ck_assert_msg(t != NULL, "registry entry %zu is NULL: not covered", i);
        int planned = 0, finished = 0;
        for (int k = 0; k < ncases; k++)
            if (cases[k].type == i) planned++, finished += done[k] == 1;
        ck_assert_msg(planned == cases_expected(t), "%s: %d cases planned, expected %d", t->name, planned,
                      cases_expected(t));
        if (finished != planned) {
            /* name the first unfinished case: its loop index is the iteration Check reports for it */
            int k = 0;
            while (cases[k].type != i || done[k] == 1) k++;
            ck_abort_msg("%s: %d of its %d cases ran to the end; first unfinished: test_case iteration %d (D = %d, "
                         "C = %d, %s)", t->name, finished, planned, k, cases[k].c.dim, cases[k].c.ctx_dim,
                         mode_names[cases[k].mode]);
        }
        covered++;
    }
    ck_assert_msg(covered == nf_bijector_ntypes, "the loop covered %zu of %zu registered types", covered,
                  nf_bijector_ntypes);
}
END_TEST

static Suite *registry_suite(void)
{
    plan_cases();
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("interface");
    tcase_add_test(tc, test_interface);
    tcase_add_loop_test(tc, test_build, 0, (int)nf_bijector_ntypes);
    suite_add_tcase(s, tc);
    tc = tcase_create("checks");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_case, 0, ncases);
    suite_add_tcase(s, tc);
    tc = tcase_create("sentinel");
    tcase_add_test(tc, test_sentinel);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    done_file = tmpfile();
    if (!done_file) {
        perror("check_registry: tmpfile");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(registry_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    fclose(done_file);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
