/* nn/made.c - degrees and masks of MADE (Germain et al. 2015), as nflows builds them.
 *
 * Input i gets a degree deg_i in 1..D (its position in the autoregressive order).  Hidden units get
 * degrees m_k = k % max(1, D-1) + min(1, D-1), i.e. cyclically 1..D-1 (all 0 when D = 1, so the units
 * then see only the context), and we sort them ascending: masked weight matrices become block
 * triangular and every hidden layer has the same degrees, so residual skips keep the property.
 * Connections: input i -> unit k iff m_k >= deg_i; unit k -> unit k' iff m_k' >= m_k;
 * unit h -> output (i, k) iff deg_i > m_h.  A path from input j to output i therefore needs
 * deg_j <= m <= ... < deg_i: output i depends only on inputs earlier in the order.
 * Context columns connect to every unit of the first layer and, unlike nflows, also directly to the
 * outputs: the outputs of the first input in the order see no hidden unit, and would otherwise
 * ignore the context (a conditional MAF whose first dimension is unconditional).
 */
#include <stdlib.h>

#include "nn/nn_internal.h"

int nf_made_input_degrees(int *deg, int D, int order, nf_rng *rng)
{
    switch (order) {
    case NF_ORDER_NATURAL:
        for (int i = 0; i < D; i++) deg[i] = i + 1;
        return NF_OK;
    case NF_ORDER_REVERSED:
        for (int i = 0; i < D; i++) deg[i] = D - i;
        return NF_OK;
    case NF_ORDER_RANDOM: {
        if (!rng) return nf_error(NF_EINVAL, "MADE: a random input order needs a random number generator");
        /* Fisher-Yates on the degrees themselves (no size_t scratch needed). */
        for (int i = 0; i < D; i++) deg[i] = i + 1;
        for (int i = D; i > 1; i--) {
            int j = (int)nf_rng_index(rng, (size_t)i), t = deg[i - 1];
            deg[i - 1] = deg[j];
            deg[j] = t;
        }
        return NF_OK;
    }
    default:
        return nf_error(NF_EINVAL, "MADE: input order %d is unknown; expected " NF_ORDER_CHOICES " (0, 1 or 2)",
                        order);
    }
}

void nf_made_hidden_degrees(int *m, int H, int D)
{
    const int mx = D - 1 > 1 ? D - 1 : 1, mn = D - 1 < 1 ? D - 1 : 1;
    /* Cyclic assignment sorted ascending: count each degree, then write them in order. */
    int at = 0;
    for (int d = mn; d < mn + mx; d++) {
        int count = H / mx + ((d - mn) < H % mx ? 1 : 0);
        for (int c = 0; c < count; c++) m[at++] = d;
    }
}

void nf_made_mask_input(unsigned char *mask, const int *m, int H, const int *deg, int D, int C)
{
    for (int k = 0; k < H; k++) {
        unsigned char *row = mask + (size_t)k * (D + C);
        for (int i = 0; i < D; i++) row[i] = m[k] >= deg[i];
        for (int c = 0; c < C; c++) row[D + c] = 1;
    }
}

void nf_made_mask_hidden(unsigned char *mask, const int *m, int H)
{
    for (int k2 = 0; k2 < H; k2++)
        for (int k = 0; k < H; k++) mask[(size_t)k2 * H + k] = m[k2] >= m[k];
}

void nf_made_mask_output(unsigned char *mask, const int *deg, int D, int opi, const int *m, int H, int C)
{
    for (int i = 0; i < D; i++)
        for (int k = 0; k < opi; k++) {
            unsigned char *row = mask + ((size_t)i * opi + k) * (H + C);
            for (int h = 0; h < H; h++) row[h] = deg[i] > m[h];
            for (int c = 0; c < C; c++) row[H + c] = 1;
        }
}

void nf_made_mask_direct(unsigned char *mask, const int *deg, int D, int opi, int C)
{
    for (int i = 0; i < D; i++)
        for (int k = 0; k < opi; k++) {
            unsigned char *row = mask + ((size_t)i * opi + k) * (D + C);
            for (int j = 0; j < D; j++) row[j] = deg[i] > deg[j];
            for (int c = 0; c < C; c++) row[D + c] = 1;
        }
}
