/* tests/check_nn_blocks.c - masked products by blocks (nn/blocks.c) and networks shared by threads.
 *
 * MADE networks multiplied by blocks, whatever the cuts (the cost model's, the mask's groups, forced
 * small blocks that make mixed blocks), give the outputs and gradients dense products give, and the
 * masked gradient entries keep exactly their previous value; the cost model's cuts of MAF-sized masks
 * cover every kept entry and skip a third of the hidden layer's products; one and two threads give
 * the same results, the weight gradients' shares covering every row block once, largest first.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/params.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

#ifdef NF_DOUBLE
#define TOL_FWD 1e-11
#else
#define TOL_FWD 3e-4
#endif

static double relerr(double a, double b, double floor)
{
    double s = fmax(fmax(fabs(a), fabs(b)), floor);
    return fabs(a - b) / s;
}

static nf_real *filled(size_t n, double lo, double hi, uint64_t seed)
{
    nf_real *x = malloc((n ? n : 1) * sizeof *x);
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert(x && r);
    nf_rng_fill_uniform(r, x, n, lo, hi);
    nf_rng_free(r);
    return x;
}

typedef struct net_case {
    nf_mlp_config cfg;
    nf_mlp *m;
    nf_params *P;
    unsigned char *masked; /* (P->n): weight entries that are zero at initialisation (MADE masks) */
    nf_real *ws, *x, *ctx, *w;
    int n;
} net_case;

typedef struct net_spec {
    const char *label;
    int in, ctx, out, hidden, layers;
    nf_activation act;
    int residual, made, opi, order, layer_norm, weight_norm;
} net_spec;

static nf_mlp_config spec_config(const net_spec *s)
{
    nf_mlp_config c;
    memset(&c, 0, sizeof c);
    c.in = s->in, c.ctx = s->ctx, c.out = s->out, c.hidden = s->hidden, c.layers = s->layers, c.act = s->act;
    c.residual = s->residual, c.made = s->made, c.out_per_input = s->opi, c.order = s->order;
    c.layer_norm = s->layer_norm, c.weight_norm = s->weight_norm;
    return c;
}

/* The network with every weight that is not masked (zero at initialisation) drawn from
 * U(-1.1, 1.1), inputs, context and the output weights w of the loss sum(w * y). */
static void net_setup(net_case *c, const nf_mlp_config *cfg, int n, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->P = nf_params_alloc();
    nf_rng *r = nf_rng_alloc(seed, 0);
    ck_assert_msg(nf_mlp_create(&c->m, cfg, c->P, "net", r) == NF_OK, "create: %s", nf_strerror_last());
    c->masked = calloc(c->P->n, 1);
    for (size_t s = 0; s < c->P->nslices; s++) {
        const nf_param_slice *sl = &c->P->slices[s];
        size_t len = strlen(sl->name);
        if (len < 7 || strcmp(sl->name + len - 7, ".weight")) continue;
        for (size_t i = sl->offset; i < sl->offset + sl->size; i++) c->masked[i] = c->P->value[i] == 0;
    }
    for (size_t i = 0; i < c->P->n; i++)
        if (!c->masked[i]) c->P->value[i] = (nf_real)(2.2 * nf_rng_uniform(r) - 1.1);
    nf_rng_free(r);
    c->n = n;
    c->x = filled((size_t)n * cfg->in, -1.7, 1.9, seed + 1);
    c->ctx = cfg->ctx ? filled((size_t)n * cfg->ctx, -1.3, 1.5, seed + 2) : NULL;
    c->w = filled((size_t)n * cfg->out, -1.2, 1.1, seed + 3);
}

static void net_teardown(net_case *c)
{
    nf_mlp_free(c->m);
    nf_params_free(c->P);
    free(c->masked), free(c->ws), free(c->x), free(c->ctx), free(c->w);
}

/* Forward and backward of one network into y, grad, dx, dctx (pre-filled so accumulation shows). */
typedef struct net_result {
    nf_real *y, *grad, *dx, *dctx;
} net_result;

static void net_run(net_case *c, net_result *r)
{
    const nf_mlp_config *cfg = &c->cfg;
    const size_t ny = (size_t)c->n * cfg->out, nx = (size_t)c->n * cfg->in, nc = (size_t)c->n * cfg->ctx;
    r->y = malloc(ny * sizeof *r->y), r->grad = malloc(c->P->n * sizeof *r->grad);
    r->dx = malloc((nx + 1) * sizeof *r->dx), r->dctx = malloc((nc + 1) * sizeof *r->dctx);
    free(c->ws);
    c->ws = malloc(nf_mlp_workspace(c->m, c->n) * sizeof(nf_real)); /* the plan may change its size */
    nf_mlp_forward(c->m, c->P, c->ws, r->y, c->x, c->ctx, c->n);
    for (size_t i = 0; i < c->P->n; i++) c->P->grad[i] = (nf_real)(0.03 * (double)(i % 7) - 0.09);
    for (size_t i = 0; i < nx; i++) r->dx[i] = (nf_real)0.271;
    for (size_t i = 0; i < nc; i++) r->dctx[i] = (nf_real)-0.364;
    nf_mlp_backward(c->m, c->P, c->ws, r->dx, r->dctx, c->w, c->x, c->ctx, c->n);
    memcpy(r->grad, c->P->grad, c->P->n * sizeof *r->grad);
}

static void net_result_free(net_result *r) { free(r->y), free(r->grad), free(r->dx), free(r->dctx); }

/* How many blocks of each class the plans of a network have. */
static void count_blocks(const nf_mlp *m, int count[3])
{
    count[0] = count[1] = count[2] = 0;
    for (int l = 0; m->blocks && l < m->nlin; l++)
        for (int k = 0; k < m->blocks[l].nrb * m->blocks[l].ncb; k++) count[m->blocks[l].cls[k]]++;
}

/* MADE products by blocks (nn/blocks.c) give what dense products give, whatever the cuts: the cost
 * model's, the groups of identical rows, and forced blocks of 1, 2, 3 and 7 (mixed blocks); masked
 * gradient entries keep their previous value exactly. */
START_TEST(test_made_blocks)
{
    static const net_spec specs[] = {
        {"made sigmoid ctx opi2 random wn", 5, 2, 10, 11, 2, NF_ACT_SIGMOID, 0, 1, 2, NF_ORDER_RANDOM, 0, 1},
        {"made tanh opi3 reversed", 4, 0, 12, 9, 1, NF_ACT_TANH, 0, 1, 3, NF_ORDER_REVERSED, 0, 0},
        {"made direct ctx", 4, 2, 8, 0, 0, NF_ACT_TANH, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
        {"residual made gelu ctx opi3", 4, 3, 12, 10, 2, NF_ACT_GELU, 1, 1, 3, NF_ORDER_NATURAL, 0, 0},
        {"residual made silu wn random", 5, 1, 5, 9, 1, NF_ACT_SILU, 1, 1, 1, NF_ORDER_RANDOM, 0, 1},
        {"made 9-D 2 x 40 ctx", 9, 2, 18, 40, 2, NF_ACT_ELU, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
        {"made 7-D 3 x 33 reversed", 7, 0, 21, 33, 3, NF_ACT_TANH, 0, 1, 3, NF_ORDER_REVERSED, 0, 0},
        {"residual made 6-D random ctx", 6, 3, 6, 25, 2, NF_ACT_SILU, 1, 1, 1, NF_ORDER_RANDOM, 0, 0},
    };
    static const int modes[] = {NF_BLOCKS_AUTO, NF_BLOCKS_GROUPS, 1, 2, 3, 7};
    const int nspec = (int)(sizeof specs / sizeof specs[0]);
    int seen_mixed = 0, seen_zero = 0;
    for (int k = 0; k < nspec; k++) {
        const net_spec *sp = &specs[k];
        nf_mlp_config cfg = spec_config(sp);
        net_case c;
        net_setup(&c, &cfg, 11, 1000 + k);
        ck_assert_int_eq(nf_mlp_replan(c.m, NF_BLOCKS_NONE), NF_OK);
        ck_assert(c.m->blocks == NULL);
        net_result ref;
        net_run(&c, &ref);
        for (size_t q = 0; q < sizeof modes / sizeof modes[0]; q++) {
            ck_assert_int_eq(nf_mlp_replan(c.m, modes[q]), NF_OK);
            int count[3];
            count_blocks(c.m, count);
            ck_assert(count[0] + count[1] + count[2] > 0);
            seen_zero += count[0] > 0;
            seen_mixed += count[2] > 0;
            net_result got;
            net_run(&c, &got);
            const double tol = 10 * TOL_FWD;
            for (int i = 0; i < c.n * cfg.out; i++)
                ck_assert_msg(relerr(got.y[i], ref.y[i], 1) < tol, "%s mode %d: y[%d] = %.10g, dense %.10g", sp->label,
                              modes[q], i, (double)got.y[i], (double)ref.y[i]);
            for (size_t i = 0; i < c.P->n; i++) {
                if (c.masked[i])
                    ck_assert_msg(got.grad[i] == (nf_real)(0.03 * (double)(i % 7) - 0.09),
                                  "%s mode %d: masked entry %zu changed", sp->label, modes[q], i);
                ck_assert_msg(relerr(got.grad[i], ref.grad[i], 1) < tol, "%s mode %d: grad[%zu] = %.10g, dense %.10g",
                              sp->label, modes[q], i, (double)got.grad[i], (double)ref.grad[i]);
            }
            for (int i = 0; i < c.n * cfg.in; i++) ck_assert(relerr(got.dx[i], ref.dx[i], 1) < tol);
            for (int i = 0; i < c.n * cfg.ctx; i++) ck_assert(relerr(got.dctx[i], ref.dctx[i], 1) < tol);
            net_result_free(&got);
        }
        net_result_free(&ref);
        net_teardown(&c);
    }
    ck_assert(seen_zero > 0 && seen_mixed > 0);
}
END_TEST

/* A batch big enough to be split over threads: one and two threads give the same outputs and
 * gradients (bit for bit with core/blas.c's own kernel, whose sums do not depend on the split). */
START_TEST(test_mlp_threads)
{
    static const net_spec specs[] = {
        {"made 9-D 2 x 64 ctx", 9, 2, 18, 64, 2, NF_ACT_RELU, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
        {"residual made 6-D random ctx wn", 6, 3, 12, 64, 2, NF_ACT_SILU, 1, 1, 2, NF_ORDER_RANDOM, 0, 1},
        {"plain ln wn ctx", 5, 2, 8, 64, 2, NF_ACT_TANH, 0, 0, 1, 0, 1, 1},
        {"residual ln", 5, 0, 8, 64, 2, NF_ACT_GELU, 1, 0, 1, 0, 1, 0},
    };
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        nf_mlp_config cfg = spec_config(&specs[k]);
        net_case c;
        net_setup(&c, &cfg, 900, 1200 + k);
        net_result one, two;
        nf_blas_set_threads(1);
        net_run(&c, &one);
        nf_blas_set_threads(2);
        ck_assert_msg(nf_nn_threads(c.n, c.n * c.m->flops_per_row) == 2, "%s: the pass is not shared (%g flops)",
                      specs[k].label, c.n * c.m->flops_per_row);
        net_run(&c, &two);
        nf_blas_set_threads(0);
        const int exact = nf_blas_get_backend() == NF_BLAS_NATIVE;
        const double tol = 10 * TOL_FWD;
        for (int i = 0; i < c.n * cfg.out; i++)
            ck_assert_msg(exact ? one.y[i] == two.y[i] : relerr(one.y[i], two.y[i], 1) < tol, "%s: y[%d]", specs[k].label, i);
        for (size_t i = 0; i < c.P->n; i++)
            ck_assert_msg(exact ? one.grad[i] == two.grad[i] : relerr(one.grad[i], two.grad[i], 1) < tol,
                          "%s: grad[%zu] %.10g vs %.10g", specs[k].label, i, (double)one.grad[i], (double)two.grad[i]);
        for (int i = 0; i < c.n * cfg.in; i++)
            ck_assert(exact ? one.dx[i] == two.dx[i] : relerr(one.dx[i], two.dx[i], 1) < tol);
        for (int i = 0; i < c.n * cfg.ctx; i++)
            ck_assert(exact ? one.dctx[i] == two.dctx[i] : relerr(one.dctx[i], two.dctx[i], 1) < tol);
        net_result_free(&one), net_result_free(&two);
        net_teardown(&c);
    }
}
END_TEST

/* The weight-gradient pass's shares (nn/mlp.c): every row block of every linear in exactly one of
 * the NF_NN_MAX_THREADS shares, handed out largest first. */
START_TEST(test_param_shares)
{
    static const net_spec specs[] = {
        {"made 8-D 2 x 256 (maf)", 8, 0, 16, 256, 2, NF_ACT_RELU, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
        {"made 9-D 2 x 64 ctx", 9, 2, 18, 64, 2, NF_ACT_RELU, 0, 1, 2, NF_ORDER_NATURAL, 0, 0},
    };
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        nf_mlp_config cfg = spec_config(&specs[k]);
        net_case c;
        net_setup(&c, &cfg, 8, 1300 + k);
        ck_assert(c.m->blocks != NULL);
        int seen[NF_NN_MAX_THREADS] = {0};
        size_t prev = (size_t)-1, sum = 0, total = 0;
        for (int q = 0; q < NF_NN_MAX_THREADS; q++) {
            const int p = c.m->param_order[q];
            ck_assert(p >= 0 && p < NF_NN_MAX_THREADS && !seen[p]);
            seen[p] = 1;
            size_t area = 0;
            for (int l = 0; l < c.m->nlin; l++) area += nf_blocks_share_area(&c.m->blocks[l], p, NF_NN_MAX_THREADS);
            ck_assert_msg(area <= prev, "%s: share %d (area %zu) handed out after a smaller one (%zu)",
                          specs[k].label, p, area, prev);
            prev = area;
            sum += area;
        }
        for (int l = 0; l < c.m->nlin; l++) {
            const nf_blocks *bk = &c.m->blocks[l];
            int next = 0; /* the shares' row blocks follow each other without gap or overlap */
            for (int p = 0; p < NF_NN_MAX_THREADS; p++) {
                int a0, a1;
                nf_blocks_share(bk, p, NF_NN_MAX_THREADS, &a0, &a1);
                if (a0 == a1) continue;
                ck_assert_int_eq(a0, next);
                next = a1;
            }
            ck_assert_int_eq(next, bk->nrb);
            total += (size_t)(bk->kept * c.m->lin[l].out * c.m->lin[l].in + 0.5);
        }
        ck_assert_msg(sum == total, "%s: the shares cover %zu of %zu computed weights", specs[k].label, sum, total);
        ck_assert(c.m->param_order[0] != c.m->param_order[NF_NN_MAX_THREADS - 1]);
        net_teardown(&c);
    }
}
END_TEST

/* The cost model's cuts of MAF-sized masks (8-D, 256 hidden units): every kept entry lies in a
 * computed block, full blocks hold no masked entry, and the hidden layer skips over 30% of its
 * products (the mask is 43% zeros). */
START_TEST(test_made_block_plan)
{
    const int D = 8, H = 256, opi = 2;
    int deg[8], m[256];
    for (int order = NF_ORDER_NATURAL; order <= NF_ORDER_REVERSED; order++) {
        nf_made_input_degrees(deg, D, order, NULL);
        nf_made_hidden_degrees(m, H, D);
        unsigned char *masks[3] = {malloc((size_t)H * D), malloc((size_t)H * H), malloc((size_t)D * opi * H)};
        const int rows[3] = {H, H, D * opi}, cols[3] = {D, H, H};
        nf_made_mask_input(masks[0], m, H, deg, D, 0);
        nf_made_mask_hidden(masks[1], m, H);
        nf_made_mask_output(masks[2], deg, D, opi, m, H, 0);
        for (int l = 0; l < 3; l++) {
            nf_blocks bk;
            ck_assert_int_eq(nf_blocks_plan(&bk, masks[l], rows[l], cols[l], cols[l], NF_BLOCKS_AUTO), NF_OK);
            ck_assert(bk.rb[0] == 0 && bk.rb[bk.nrb] == rows[l] && bk.cb[0] == 0 && bk.cb[bk.ncb] == cols[l]);
            size_t kept = 0, computed = 0;
            for (int r = 0; r < rows[l]; r++)
                for (int c = 0; c < cols[l]; c++) {
                    int a = 0, b = 0;
                    while (bk.rb[a + 1] <= r) a++;
                    while (bk.cb[b + 1] <= c) b++;
                    const int cls = bk.cls[a * bk.ncb + b], on = masks[l][(size_t)r * cols[l] + c];
                    ck_assert_msg(cls != 0 || !on, "layer %d: kept entry (%d, %d) in a skipped block", l, r, c);
                    ck_assert_msg(cls != 1 || on, "layer %d: masked entry (%d, %d) in a full block", l, r, c);
                    kept += on;
                    computed += cls != 0;
                }
            /* bk.kept (the threading threshold's flops) is the fraction of W in non-zero blocks */
            ck_assert_msg(fabs(bk.kept - (double)computed / ((double)rows[l] * cols[l])) < 1e-12,
                          "layer %d: kept %.6f, the non-zero blocks cover %.6f", l, bk.kept,
                          (double)computed / ((double)rows[l] * cols[l]));
            if (l == 1) {
                ck_assert(kept < 0.6 * H * H);
                ck_assert_msg(bk.kept < 0.7, "hidden layer: %.3f of the products kept", bk.kept);
            }
            nf_blocks_free(&bk);
        }
        for (int l = 0; l < 3; l++) free(masks[l]);
    }
}
END_TEST

static Suite *nn_blocks_suite(void)
{
    Suite *s = suite_create("nn_blocks");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_made_blocks);
    tcase_add_test(t, test_made_block_plan);
    tcase_add_test(t, test_mlp_threads);
    tcase_add_test(t, test_param_shares);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nn_blocks_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
