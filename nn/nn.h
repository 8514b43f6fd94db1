/* nn/nn.h - neural layers with hand-written backward passes: the conditioners inside bijectors.
 *
 * Conventions (after llm.c): batches are row-major (n, width); parameters live in an nf_params store
 * and a layer keeps only offsets into it; forward writes its output and caches what backward needs in
 * a caller-provided workspace; backward ACCUMULATES (+=) into input gradients (dx, dctx may be NULL
 * when not wanted) and into P->grad.  Nothing here allocates during forward or backward: ask
 * nf_mlp_workspace(m, n) for the number of nf_reals a batch of n needs and pass the same workspace to
 * forward and then backward.
 *
 * The one network type, nf_mlp, covers every conditioner a flow uses:
 *   - plain MLP:     [x | ctx] -> (Linear, act) x layers -> Linear -> out
 *   - residual MLP:  [x | ctx] -> Linear -> blocks of (act, Linear, act, Linear) + skip -> act? -> Linear
 *   - MADE (made=1): the same networks with autoregressive masks on x.  Input i has degree
 *     deg[i] in 1..D (natural, reversed or seeded random order); hidden units get degrees in 1..D-1
 *     (0 when D = 1: they see only the context), SORTED ascending so masked products are
 *     block-triangular; output k*... (see below) for input i may depend only on inputs of smaller
 *     degree.  Context is connected to every unit of the first layer and to every output.
 *     Masked weights are stored as zeros and their gradients are masked, so they stay zero under
 *     any optimizer without a multiply in forward.
 * Outputs are laid out per input dimension: out has in * out_per_input columns and column
 * i * out_per_input + k is parameter k of dimension i (for MADE and for coupling conditioners alike).
 * zero_init_output sets the last layer's weights and bias to zero, so a flow starts as the identity.
 */
#ifndef NF_NN_H
#define NF_NN_H

#include "core/params.h"
#include "core/rng.h"

typedef enum nf_activation {
    NF_ACT_RELU, NF_ACT_LEAKY_RELU, NF_ACT_ELU, NF_ACT_SELU, NF_ACT_TANH,
    NF_ACT_SIGMOID, NF_ACT_GELU, NF_ACT_SILU, NF_ACT_IDENTITY
} nf_activation;

#define NF_ACTIVATION_CHOICES "relu|leaky-relu|elu|selu|tanh|sigmoid|gelu|silu|identity"
/* Parse a name from NF_ACTIVATION_CHOICES; NF_EINVAL with the list otherwise. */
int nf_activation_parse(const char *name, nf_activation *out);
const char *nf_activation_name(nf_activation a);
/* y = f(x), n entries (y may alias x only if backward is given x from elsewhere). */
void nf_act_forward(nf_activation a, nf_real *y, const nf_real *x, size_t n);
/* dx += dy * f'(x); y = f(x) is passed so cheap derivatives can use it. */
void nf_act_backward(nf_activation a, nf_real *dx, const nf_real *dy, const nf_real *x, const nf_real *y,
                     size_t n);
/* The same with leaky relu's negative slope given (nf_act_forward/backward use 0.01; the other
 * activations ignore it); accumulate = 0 overwrites dx with dy * f'(x) instead of adding. */
void nf_act_forward_ex(nf_activation a, double slope, nf_real *y, const nf_real *x, size_t n);
/* GELU y = x Phi(x) over n entries, x overwritten with GELU'(x): the backward is then dy * x, the same
 * bits as nf_act_backward of GELU.  y must not alias x. */
void nf_act_gelu_forward_grad(nf_real *y, nf_real *x, size_t n);
/* dx = dy * d over n entries (d a kept derivative; dx may alias dy). */
void nf_act_grad_apply(nf_real *dx, const nf_real *dy, const nf_real *d, size_t n);
void nf_act_backward_ex(nf_activation a, double slope, nf_real *dx, const nf_real *dy, const nf_real *x,
                        const nf_real *y, size_t n, int accumulate);

/* Linear layer y = x W^T + b, W (out, in) row-major, b (out).  Optional weight normalisation
 * (W_j = g_j V_j / |V_j|, V stored where W would be) and an optional 0/1 mask (out, in) owned by
 * the caller (masked entries of W are kept at zero, their gradients masked). */
typedef struct nf_linear {
    int in, out;
    size_t w, b, g;          /* offsets in the store: W or V (out*in), b (out), g (out) */
    int weight_norm;
    const unsigned char *mask; /* (out, in) or NULL */
} nf_linear;

int nf_linear_init(nf_linear *L, nf_params *P, const char *name, int in, int out, int weight_norm,
                   const unsigned char *mask, nf_rng *rng);
/* Zero W and b (and set g so the layer stays zero with weight norm). */
void nf_linear_zero(nf_linear *L, nf_params *P);
size_t nf_linear_workspace(const nf_linear *L, int n);  /* weight norm needs the effective W */
void nf_linear_forward(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x, int n);
void nf_linear_backward(const nf_linear *L, nf_params *P, nf_real *ws, nf_real *dx, const nf_real *dy,
                        const nf_real *x, int n);
/* The same on the concatenation [x | c] without copying it: x (n, in - nc), c (n, nc) (NULL when
 * nc = 0).  accumulate = 1 makes forward add into y (residual skips) and backward add into dx;
 * accumulate = 0 overwrites them.  dc (the caller's context gradient) and the parameter gradients
 * always accumulate.  dx, dc may be NULL. */
void nf_linear_forward_cat(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                           const nf_real *c, int nc, int accumulate, int n);
void nf_linear_backward_cat(const nf_linear *L, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dc,
                            const nf_real *dy, const nf_real *x, const nf_real *c, int nc, int accumulate, int n);
/* y = res + x W^T + b: a residual skip in one pass (the same numbers as copying res into y and
 * forward_cat with accumulate = 1). */
void nf_linear_forward_res(const nf_linear *L, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *res,
                           const nf_real *x, int n);

/* Layer normalisation over the last axis: y = (x - mean) * rstd * gamma + beta. cache: (n, 2). */
typedef struct nf_layernorm {
    int width;
    size_t gamma, beta;
} nf_layernorm;
int nf_layernorm_init(nf_layernorm *L, nf_params *P, const char *name, int width);
void nf_layernorm_forward(const nf_layernorm *L, const nf_params *P, nf_real *y, nf_real *cache,
                          const nf_real *x, int n);
void nf_layernorm_backward(const nf_layernorm *L, nf_params *P, nf_real *dx, const nf_real *dy,
                           const nf_real *x, const nf_real *cache, int n);

enum { NF_ORDER_NATURAL = 0, NF_ORDER_REVERSED = 1, NF_ORDER_RANDOM = 2 };
#define NF_ORDER_CHOICES "natural|reversed|random"

typedef struct nf_mlp_config {
    int in;                 /* data inputs */
    int ctx;                /* context inputs (0: none) */
    int out;                /* outputs; for MADE must be in * out_per_input */
    int hidden;             /* width of every hidden layer */
    int layers;             /* hidden layers (plain) or residual blocks (residual) */
    nf_activation act;
    int residual;           /* 0: plain MLP, 1: residual MLP */
    int made;               /* 1: autoregressive masks on x */
    int out_per_input;      /* MADE: outputs per input dimension (1 if unused) */
    int order;              /* MADE input order: NF_ORDER_* */
    int layer_norm;         /* layer normalisation after each hidden linear */
    int weight_norm;        /* weight normalisation on every linear */
    int zero_init_output;   /* last layer starts at zero */
    double leaky_slope;     /* for leaky relu (default 0.01 when 0) */
} nf_mlp_config;

typedef struct nf_mlp nf_mlp;

/* Build the network, registering its parameters under "<name>." in P and initialising them
 * (uniform +-1/sqrt(fan_in), as torch.nn.Linear).  rng also draws a random MADE order. */
int nf_mlp_create(nf_mlp **m, const nf_mlp_config *cfg, nf_params *P, const char *name, nf_rng *rng);
void nf_mlp_free(nf_mlp *m);
const nf_mlp_config *nf_mlp_get_config(const nf_mlp *m);
/* MADE: degree (1..in) of each input; NULL for a plain network. */
const int *nf_mlp_input_degrees(const nf_mlp *m);
size_t nf_mlp_workspace(const nf_mlp *m, int n);
/* y (n, out) = net(x (n, in), ctx (n, ctx) or NULL). */
void nf_mlp_forward(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                    const nf_real *ctx, int n);
/* MADE, incrementally: 1 when the network supports nf_mlp_forward_level (a plain MADE without layer
 * norm or weight norm, with hidden layers).  nf_mlp_forward_level(k) computes what input degree k
 * adds: the hidden units of degree k - 1 and the outputs of the inputs of degree k (the other
 * outputs of y are left alone), reading x's inputs of degree < k and the hidden units that levels
 * 1..k-1 left in ws (level 1 starts afresh; call the levels in order, on the same n rows).  The
 * outputs of level k equal nf_mlp_forward's at this x; levels 1..D together cost one pass. */
int nf_mlp_has_levels(const nf_mlp *m);
void nf_mlp_forward_level(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                          const nf_real *ctx, int n, int k);
/* The same for rows r0..r1-1 of the n rows (ws laid out for n): each row's values depend on that row
 * alone, so parts of the rows may run on different threads (nf_mlp_run_rows), each calling the
 * levels in order. */
void nf_mlp_forward_level_rows(const nf_mlp *m, const nf_params *P, nf_real *ws, nf_real *y, const nf_real *x,
                               const nf_real *ctx, int n, int r0, int r1, int k);
/* fn(arg, r0, r1) over parts of the rows 0..n-1 on as many threads as a forward pass of m over n rows
 * would take (one part, on the caller, for a small pass or inside a parallel part). */
typedef void nf_rows_fn(void *arg, int r0, int r1);
void nf_mlp_run_rows(const nf_mlp *m, int n, nf_rows_fn *fn, void *arg);
/* After forward with the same ws: dx += dL/dx, dctx += dL/dctx (either may be NULL), P->grad += dL/dtheta. */
void nf_mlp_backward(const nf_mlp *m, nf_params *P, nf_real *ws, nf_real *dx, nf_real *dctx,
                     const nf_real *dy, const nf_real *x, const nf_real *ctx, int n);

#endif
